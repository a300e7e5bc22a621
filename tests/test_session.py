"""A run's session: what it opens is closed together, last first; an error while opening closes
what was already open; closing twice does nothing."""

import pytest

from graft.session import RunSession


class Thing:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def close(self) -> None:
        self.log.append(self.name)


def test_what_a_session_opens_stays_open_then_closes_last_first():
    log: list[str] = []
    session = RunSession()
    with session.opening():
        pool = session.open(Thing("pool", log))
        session.open(Thing("backend", log))
    assert log == [] and pool.name == "pool"
    session.open(Thing("recorder", log))  # opened later in the run
    session.close()
    assert log == ["recorder", "backend", "pool"]
    session.close()
    assert log == ["recorder", "backend", "pool"]


def test_an_error_while_opening_closes_what_was_open_and_goes_on():
    log: list[str] = []
    session = RunSession()
    with pytest.raises(ValueError, match="the model will not load"), session.opening():
        session.open(Thing("pool", log))
        raise ValueError("the model will not load")
    assert log == ["pool"]
    with pytest.raises(KeyboardInterrupt), session.opening():  # an interrupt as much
        session.open(Thing("backend", log))
        raise KeyboardInterrupt
    assert log == ["pool", "backend"]


def test_a_trainer_refused_after_its_pool_opened_leaves_no_worker_behind(tmp_path, monkeypatch):
    """A stored peer whose store cannot be opened is refused after the verifier pool and the
    policies started: the session closes both, the backend first, so no worker outlives the
    error."""
    from graft.backends.inprocess import InProcessBackend
    from graft.config import Config, load_config
    from graft.store import StoreError
    from graft.trainer import Trainer
    from graft.verify.pool import VerifierPool

    closed: list[str] = []
    for cls, name in ((VerifierPool, "pool"), (InProcessBackend, "backend")):
        real = cls.close
        monkeypatch.setattr(cls, "close", lambda self, r=real, n=name: (closed.append(n), r(self)))
    sets = [f"run.out_dir={tmp_path / 'run'}", "exchange.source=stored", "run.backend=inprocess",
            "exchange.stored.path=nosuchscheme://nowhere/trajectories"]  # fmt: skip
    cfg = load_config(Config, "configs/grpo_tiny.yaml", sets)
    with pytest.raises(StoreError, match=r"exchange\.stored\.path .* cannot open it"):
        Trainer(cfg)
    assert closed == ["backend", "pool"]
