"""Experiment trackers (`run.report_to`): the metrics of metrics.jsonl, step by step, the resolved
config as the run's parameters, and PNGs as artifacts, in TensorBoard, Weights & Biases, MLflow
or trackio.

Each tracker is an optional extra. `check_trackers` runs before any model loads: a tracker that
is not installed, has no credentials or cannot reach its server ends the command in one line.
`open_trackers` starts (or, on resume, reopens) the tracker runs; which run each tracker writes
to is kept in RUN_DIR/trackers.json, so a resumed run continues the same tracker run. Only
finite numbers are logged (metrics.jsonl also keeps non-finite values, as strings). A step that
a resume runs again is logged again; a reader that keeps each step's last value agrees with
metrics.jsonl (TensorBoard drops the earlier events itself).

Where each one writes:
    tensorboard  RUN_DIR/tensorboard/
    wandb        RUN_DIR/wandb/ (WANDB_MODE=offline: there only; `wandb sync` uploads it later)
    mlflow       MLflow's tracking URI (MLFLOW_TRACKING_URI, else MLflow's default)
    trackio      trackio's local store (TRACKIO_DIR), or a Space (TRACKIO_SPACE_ID)
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from graft.config.lib import ConfigError
from graft.errors import DataError
from graft.rundir.progress import warn as _warn

TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")
TRACKERS_FILE = "trackers.json"
CONNECT_TIMEOUT_S = 5.0


class Tracker(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def artifact(self, path: Path, step: int) -> None: ...
    def close(self, ok: bool) -> None: ...


def numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (what the trackers are given)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def mlflow_key(key: str) -> str:
    """A metric name MLflow accepts: `@` becomes `_at_`, other characters MLflow refuses `_`."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", key.replace("@", "_at_"))


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as dotted keys and string values (`run.seed` -> "0")."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, f"{name}."))
        else:
            out[name] = json.dumps(value) if isinstance(value, list | tuple) else str(value)
    return out


# ---------------------------------------------------------------------- checks before any work
def _refuse(name: str, why: str) -> ConfigError:
    return ConfigError(f"run.report_to: {name} {why}")


def _reachable(url: str, name: str, hint: str) -> None:
    """A TCP connection to the host of `url` opens within CONNECT_TIMEOUT_S."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname or "", port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise _refuse(name, f"cannot reach {url} ({err}); {hint}") from None


def _check_wandb() -> None:
    mode = os.environ.get("WANDB_MODE", "online").lower()
    if mode in ("offline", "disabled", "dryrun"):
        return
    import wandb

    offline = "set WANDB_MODE=offline to log into RUN_DIR/wandb without a network"
    if not (os.environ.get("WANDB_API_KEY") or _wandb_key(wandb)):
        raise _refuse("wandb", f"has no API key (run `wandb login`, or {offline})")
    _reachable(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"), "wandb", offline)


def _wandb_key(wandb: Any) -> bool:
    """A key `wandb login` stored; W&B raises (rather than prompts) without a terminal."""
    try:
        return bool(wandb.Api().api_key)
    except Exception:  # wandb.errors.UsageError: no key configured
        return False


def _check_mlflow() -> None:
    import mlflow

    uri = mlflow.get_tracking_uri()
    hint = "set MLFLOW_TRACKING_URI to a reachable server or to sqlite:///PATH/mlflow.db"
    if uri.startswith(("http://", "https://")):
        _reachable(uri, "mlflow", hint)
    elif uri.startswith("sqlite:") and importlib.util.find_spec("sqlalchemy") is None:
        raise _refuse("mlflow", f"tracking URI {uri} needs sqlalchemy: {_pip('mlflow')}")


def _check_trackio() -> None:
    space = os.environ.get("TRACKIO_SPACE_ID")
    if space:
        hint = "unset TRACKIO_SPACE_ID to log into trackio's local store"
        _reachable("https://huggingface.co", "trackio", f"TRACKIO_SPACE_ID={space}; {hint}")


def _pip(name: str) -> str:
    from graft.extras import install_hint

    return install_hint(name)


_SERVER_CHECKS = {"wandb": _check_wandb, "mlflow": _check_mlflow, "trackio": _check_trackio}


def check_trackers(names: tuple[str, ...]) -> None:
    """Each named tracker is installed, and one that logs to a server has credentials and reaches
    it; else ConfigError in one line. Runs before any model loads."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise _refuse(name, f"is not installed: {_pip(name)}")
        if name in _SERVER_CHECKS:
            _SERVER_CHECKS[name]()


# ---------------------------------------------------------------------- the trackers
class _TensorBoard:
    def __init__(self, at: _Where, state: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops the events of the steps a resume runs again
        purge = at.start_step + 1 if at.start_step else None
        self.writer = SummaryWriter(
            str(at.run_dir / "tensorboard"), purge_step=purge, flush_secs=10
        )
        text = "\n".join(f"    {k}: {v}" for k, v in at.params.items())
        self.writer.add_text("config", text, at.start_step)
        self.state: dict[str, Any] = {}

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():  # written by the writer's thread, every 10 s
            self.writer.add_scalar(key, value, step)

    def artifact(self, path: Path, step: int) -> None:
        if path.suffix == ".png":
            import matplotlib.image

            image = matplotlib.image.imread(str(path))[..., :3]
            self.writer.add_image(f"plots/{path.stem}", image, step, dataformats="HWC")
        elif path.suffix == ".md":
            self.writer.add_text(f"reports/{path.stem}", path.read_text(encoding="utf-8"), step)

    def close(self, ok: bool) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, at: _Where, state: dict) -> None:
        import wandb

        self.wandb = wandb
        self.state = {"id": state.get("id") or _short_id()}
        self.run = wandb.init(
            project=at.project,
            name=at.name,
            id=self.state["id"],
            resume="allow",
            dir=str(at.run_dir),
            config=at.config,
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log({"step": step, **metrics})

    def artifact(self, path: Path, step: int) -> None:
        if path.suffix == ".png":
            self.run.log({"step": step, f"plots/{path.stem}": self.wandb.Image(str(path))})
        else:
            self.run.save(str(path), base_path=str(path.parent), policy="now")

    def close(self, ok: bool) -> None:
        self.run.finish(exit_code=0 if ok else 1)


class _MLflow:
    def __init__(self, at: _Where, state: dict) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        self.pending: list[Any] = []
        self.state = {"run_id": state.get("run_id"), "tracking_uri": self.client.tracking_uri}
        if self.state["run_id"]:
            run = self.client.get_run(self.state["run_id"])
            self.client.update_run(self.state["run_id"], status="RUNNING")
            logged = run.data.params
        else:
            found = self.client.get_experiment_by_name(at.project)
            experiment = found.experiment_id if found else self.client.create_experiment(at.project)
            self.state["run_id"] = self.client.create_run(experiment, run_name=at.name).info.run_id
            logged = {}
        run_id = self.state["run_id"]
        # MLflow refuses to change a parameter: one a resume changed is kept as a tag instead
        new = {k: v[:6000] for k, v in at.params.items() if k not in logged}
        for key, value in at.params.items():
            if key in logged and logged[key] != value[:6000]:
                self.client.set_tag(run_id, f"resumed.{key}", value[:5000])
        items = [Param(k, v) for k, v in new.items()]
        for at in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[at : at + 100])

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(mlflow_key(k), v, now, step) for k, v in metrics.items()]
        for at in range(0, len(items), 1000):  # queued: MLflow writes on its own thread
            batch = items[at : at + 1000]
            self.pending.append(
                self.client.log_batch(self.state["run_id"], metrics=batch, synchronous=False)
            )

    def artifact(self, path: Path, step: int) -> None:
        self.client.log_artifact(self.state["run_id"], str(path))

    def close(self, ok: bool) -> None:
        for operation in self.pending:  # every queued step is written before the run ends
            operation.wait()
        self.pending = []
        self.client.set_terminated(self.state["run_id"], "FINISHED" if ok else "FAILED")


class _Trackio:
    def __init__(self, at: _Where, state: dict) -> None:
        import trackio

        self.trackio = trackio
        self.state = {
            "project": at.project,
            "name": state.get("name") or f"{at.name}-{_short_id()}",
        }
        self.run = trackio.init(
            project=at.project,
            name=self.state["name"],
            config=at.config,
            resume="allow",
            auto_log_cpu=False,
            auto_log_gpu=False,
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def artifact(self, path: Path, step: int) -> None:
        if path.suffix == ".png":
            self.run.log({f"plots/{path.stem}": self.trackio.Image(str(path))}, step=step)

    def close(self, ok: bool) -> None:
        self.run.finish()


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _short_id() -> str:
    return uuid.uuid4().hex[:8]


class Trackers:
    """The run's trackers, as one: `log` a step's metrics, `artifact` a file, `close`."""

    def __init__(self, run_dir: Path, trackers: dict[str, Tracker]) -> None:
        self.run_dir = run_dir
        self.trackers = trackers

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        values = numbers(metrics)
        self._each(f"log step {step}", lambda tracker: tracker.log(step, values))

    def artifact(self, path: Path, step: int) -> None:
        self._each(f"keep {path.name}", lambda tracker: tracker.artifact(path, step))

    def close(self, ok: bool = True) -> None:
        self._each("finish its run", lambda tracker: tracker.close(ok))
        self.trackers = {}

    def _each(self, what: str, call: Callable[[Tracker], None]) -> None:
        """`call` on every tracker; one that fails is dropped with a warning, and the run goes on
        (metrics.jsonl holds every step either way)."""
        for name, tracker in list(self.trackers.items()):
            try:
                call(tracker)
            except Exception as err:
                del self.trackers[name]
                _warn(
                    f"run.report_to: {name} failed to {what} ({_first_line(err)}); "
                    "going on without it (metrics.jsonl has every step)"
                )

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.close(ok=kind is None)


def open_trackers(
    names: tuple[str, ...],
    run_dir: Path,
    *,
    project: str,
    config: dict[str, Any],
    start_step: int = 0,
    name: str = "",
    state_file: str = TRACKERS_FILE,
) -> Trackers:
    """Start each named tracker's run (named `name`, default the folder's name), or reopen the
    one RUN_DIR/`state_file` names (a resume). A tracker that fails to start ends the command in
    one line."""
    path = run_dir / state_file
    saved = _saved_runs(path) if names and path.exists() else {}
    at = _Where(run_dir, project, name or run_dir.name, config, flat_params(config), start_step)
    opened: dict[str, Tracker] = {}
    try:
        for tracker in names:
            state = saved.get(tracker, {})
            try:
                opened[tracker] = _open(tracker, at, state)
            except ConfigError:
                raise
            except Exception as err:  # a tracker's own failure to start, in one line
                raise _refuse(tracker, f"could not start its run: {_first_line(err)}") from None
            saved[tracker] = opened[tracker].state  # type: ignore[attr-defined]
    except BaseException:
        Trackers(run_dir, opened).close(ok=False)
        raise
    if names:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved, indent=2, sort_keys=True))
        os.replace(tmp, path)
    return Trackers(run_dir, opened)


def _saved_runs(path: Path) -> dict[str, dict]:
    """trackers.json: tracker name -> what reopens its run; anything else is an error naming it."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # UnicodeDecodeError included
        raise DataError(
            f"{path}: unreadable ({err}); remove it to start new tracker runs"
        ) from None
    if not isinstance(body, dict) or not all(isinstance(v, dict) for v in body.values()):
        raise DataError(
            f"{path}: not a mapping of tracker name to its run; remove it to start anew"
        )
    return body


@dataclass(frozen=True)
class _Where:
    """What every tracker is told when its run starts."""

    run_dir: Path
    project: str
    name: str
    config: dict[str, Any]
    params: dict[str, str]
    start_step: int


def report_outputs(
    names: tuple[str, ...],
    out: Path,
    *,
    kind: str,
    files: list[Path],
    config: dict[str, Any],
    project: str,
) -> None:
    """A command's output files (`graft compare`'s, `graft demo`'s) as one tracker run named
    `<kind>-<folder>`; running the command again in the same folder logs into the same run."""
    with open_trackers(
        names,
        out,
        project=project,
        config=config,
        name=f"{kind}-{out.name}",
        state_file=f"{kind}.trackers.json",
    ) as trackers:
        for path in files:
            trackers.artifact(path, 0)


def _open(tracker: str, at: _Where, state: dict) -> Tracker:
    kind = {"tensorboard": _TensorBoard, "wandb": _WandB, "mlflow": _MLflow, "trackio": _Trackio}
    return kind[tracker](at, state)
