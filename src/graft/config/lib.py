"""Generic, strict loading of nested frozen dataclasses from YAML and dotted overrides.

Kept apart from `config.py` so that the config file reads as a list of fields with their docs.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import textwrap
import types
import typing
import warnings
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config problem, reported before any work starts; the message names the key."""


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {_type_name(args[0])}"
        return f"list of {len(args)} values ({', '.join(_type_name(a) for a in args)})"
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, converting YAML scalars where unambiguous."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        return from_dict(tp, value, prefix=key)
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{key}: must be one of {_type_name(tp)} (got {value!r})")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if type(None) in args and (value is None or (value == "" and str not in args)):
            return None  # null, or nothing after `--set KEY=`
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(f"{key}: expected {_type_name(tp)} (got {value!r})")
    if origin is tuple:
        args = get_args(tp)
        if isinstance(value, str) and get_origin(args[0]) is Literal and args[1:] == (Ellipsis,):
            value = [value]  # one choice of a list of choices: `report_to: wandb`
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], f"{key}.{i}") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
        return tuple(_convert(v, a, f"{key}.{i}") for i, (v, a) in enumerate(zip(value, args)))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-5" as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported field type {tp!r}")


REPLACED = {"run.tensorboard": "run.report_to (write run.report_to: [tensorboard])"}
"""Keys of earlier versions that no longer load, and what took their place."""

_ABLATION = ("weight", "eos_in_score", "replacement", "peer_position", "selection", "admission")
_STORED = {"store": "path", "peer_model": "model", "peer_run": "run", "peer_records": "records"}
MOVED = {
    **{f"exchange.{k}": f"exchange.ablation.{k}" for k in _ABLATION},
    **{f"exchange.{k}": f"exchange.ablation.{k}" for k in ("peer_update", "sgt_coef")},
    "exchange.luffy_gamma": "exchange.ablation.luffy_gamma",
    **{f"exchange.{k}": f"exchange.stored.{v}" for k, v in _STORED.items()},
    "exchange.peer_step": "exchange.stored.step",
    "exchange.peer_rewards": "exchange.stored.rewards",
    "exchange.skip_damaged_shards": "exchange.stored.skip_damaged_shards",
}
"""Keys of earlier versions that still load, each with a one-line warning, and their new key."""

INTERNAL = {"internal": True}
"""Field metadata of a switch that changes no result (a speed path that tests and benchmarks
turn off to compare): settable, but left out of the config reference users read."""


class ConfigDeprecationWarning(FutureWarning):
    """A config key of an earlier version, loaded under its new name."""


def _move_deprecated(data: dict[str, Any], prefix: str, *, warn: bool = True) -> dict[str, Any]:
    """`data` (the mapping at `prefix`) with each key of MOVED under its new place, warning once
    per key (unless not `warn`); ConfigError when the old and the new key are both set."""
    moved = {k: v for k, v in data.items() if f"{prefix}.{k}" in MOVED}
    if not moved:
        return data
    out = {k: v for k, v in data.items() if k not in moved}
    for key, value in moved.items():
        old, new = f"{prefix}.{key}", MOVED[f"{prefix}.{key}"]
        section, leaf = new[len(prefix) + 1 :].split(".")
        target = out.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{prefix}.{section}: expected a mapping, got {target!r}")
        if leaf in target:
            raise ConfigError(f"{old}: set twice, as {old} and as {new}; keep {new}")
        out[section] = {**target, leaf: value}
        if warn:
            message = f"config key {old} is deprecated; it is now {new}"
            warnings.warn(message, ConfigDeprecationWarning, stacklevel=2)
    return out


def current_shape(data: dict[str, Any]) -> dict[str, Any]:
    """A whole config mapping as written by an earlier version (a run's config.yaml), with its
    MOVED keys in their current places, silently: a record is read, not a user's config."""
    out = dict(data)
    for section in sorted({old.split(".")[0] for old in MOVED}):
        if isinstance(out.get(section), dict):
            out[section] = _move_deprecated(out[section], section, warn=False)
    return out


def from_dict(cls: type[T], data: dict[str, Any], *, prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping; unknown keys and wrong types raise ConfigError."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    data = _move_deprecated(data, prefix)
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else str(key)
            if where in REPLACED:
                raise ConfigError(f"{where}: replaced by {REPLACED[where]}")
            close = [n for n in sorted(names) if n.startswith(str(key)[:3])]
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {sorted(names)}"
            raise ConfigError(f"{where}: unknown key{hint}")
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        kwargs[name] = _convert(value, hints[name], key)
    return cls(**kwargs)


def to_dict(obj: Any) -> Any:
    """Plain YAML-able structure of a (nested) dataclass."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    return obj


def _parse_scalar(text: str) -> Any:
    """A `--set` value as YAML reads it; nothing at all (`KEY=`) is the empty string, which
    clears a string option (YAML would read null, which no string option takes)."""
    if not text.strip():
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply `a.b.0.c=value` to a plain dict in place (list entries by index)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE")
    dotted, raw = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if not all(part.strip() for part in parts):
        what = "no key before '='" if not dotted.strip() else "an empty part in the key"
        raise ConfigError(f"--set {assignment!r}: {what} (expected KEY=VALUE, e.g. run.steps=10)")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"{where}: no list entry {part} (the list has {len(node)})")
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, dict | list):
                raise ConfigError(f"{where}: is a value, not a section")
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"{dotted}: no list entry {last} (the list has {len(node)})")
        node[int(last)] = _parse_scalar(raw)
    else:
        node[last] = _parse_scalar(raw)


def load_config(
    cls: type[T], path: str | Path | None = None, overrides: typing.Sequence[str] = ()
) -> T:
    """Read YAML at `path` (optional), apply dotted overrides, build `cls` (whose constructor runs
    its own cross-field checks, as `graft.config.Config`'s does)."""
    data: dict[str, Any] = {}
    if path is not None:
        path = _config_path(path)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"config file {path} is not UTF-8 text ({err.reason} at byte {err.start}); "
                "is it a YAML file?"
            ) from None
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
            cause = getattr(err, "problem", None) or " ".join(str(err).split())
            raise ConfigError(f"config file {path} is not valid YAML{at}: {cause}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping")
        data = _current_keys(loaded or {})  # the file's own: both names in it are refused
    if overrides:
        data = _with_defaults_for_lists(cls, data)
    for assignment in current_overrides(overrides):
        apply_override(data, assignment)
    return from_dict(cls, data)


def _current_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A config file's mapping with its MOVED keys in their current places, each with its one
    warning; a key the file sets under both names is refused."""
    out = dict(data)
    for section in sorted({old.split(".")[0] for old in MOVED}):
        if isinstance(out.get(section), dict):
            out[section] = _move_deprecated(out[section], section)
    return out


def current_overrides(overrides: typing.Sequence[str]) -> list[str]:
    """`--set` assignments with a MOVED key under its current name, each with its one warning:
    the command line is the latest word, so it takes the place of the file's value under either
    name. A key the command line sets under both names is refused."""
    out, named = [], {}
    for assignment in overrides:
        dotted, eq, raw = assignment.partition("=")
        key = dotted.strip()
        new = MOVED.get(key)
        if eq and new is not None:
            message = f"config key {key} is deprecated; it is now {new}"
            warnings.warn(message, ConfigDeprecationWarning, stacklevel=3)
            assignment = f"{new}={raw}"
        current = new or key
        if eq and named.setdefault(current, key) != key:
            first = named[current]
            raise ConfigError(f"--set {first} and --set {key}: set twice, as {first} and as {key}")
        out.append(assignment)
    return out


def expand_user(path: str, what: str) -> str:
    """`path` with a leading `~` or `~user` expanded; ConfigError naming `what` (a key) when the
    user does not exist (the path would otherwise name a folder literally called `~user`)."""
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        raise ConfigError(f"{what} {path}: cannot resolve {path.split('/', 1)[0]} (no such user)")
    return expanded


def _config_path(path: str | Path) -> Path:
    """The config file at `path` (`~user` expanded); ConfigError when it is not a file."""
    out = Path(expand_user(str(path), "config file"))
    if out.is_dir():
        raise ConfigError(f"config file {out} is a directory, not a YAML file")
    if not out.is_file():
        raise ConfigError(f"config file {out} does not exist")
    return out


def _with_defaults_for_lists(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Fill list fields absent from `data` with their defaults so that `models.0.x=...` works."""
    out = dict(data)
    for f in dataclasses.fields(cls):
        hint = get_type_hints(cls)[f.name]
        if f.name not in out:
            if get_origin(hint) is tuple:
                default = (
                    f.default_factory()
                    if f.default_factory is not dataclasses.MISSING
                    else f.default
                )  # type: ignore[misc]
                out[f.name] = to_dict(default)
        elif dataclasses.is_dataclass(hint) and isinstance(out[f.name], dict):
            out[f.name] = _with_defaults_for_lists(hint, out[f.name])
    return out


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string literal below each field)."""
    source = textwrap.dedent(inspect.getsource(cls))
    body = ast.parse(source).body[0]
    docs: dict[str, str] = {}
    stmts = getattr(body, "body", [])
    for stmt, nxt in zip(stmts, [*stmts[1:], None]):
        is_field = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        if is_field and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[stmt.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def describe(
    cls: type, prefix: str = "", *, internal: bool = False
) -> list[tuple[str, str, str, str]]:
    """Rows (key, type, default, doc) for every leaf field, for `graft config --help`; the
    INTERNAL switches only when `internal` is set."""
    rows = []
    hints = get_type_hints(cls)
    docs = field_docs(cls)
    default_obj = cls()
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal") and not internal:
            continue
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        value = getattr(default_obj, f.name)
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, prefix=f"{key}.", internal=internal))
        elif get_origin(tp) is tuple and get_args(tp) and dataclasses.is_dataclass(get_args(tp)[0]):
            rows.append((key, f"list of {get_args(tp)[0].__name__}", "", docs.get(f.name, "")))
            rows.extend(describe(get_args(tp)[0], prefix=f"{key}.N.", internal=internal))
        else:
            rows.append((key, _type_name(tp), repr(to_dict(value)), docs.get(f.name, "")))
    return rows
