"""Every config key with its type, default, accepted values and meaning: what `graft config
--docs` prints and what the documentation's config reference is generated from.

The type, default and meaning come from the schema (`lib.describe`: the annotations, the defaults
and the docstring below each field). The accepted values come from the checks themselves: each
key is given a value no check should let through (the empty string, an empty list, NaN, a huge
negative and a huge positive integer), the config is made, and what `checks.validate` says about
that key is kept. So the reference cannot say a bound the checks do not enforce.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from graft.config.lib import ConfigError, describe, from_dict

HUGE = 2**62
"""An integer past every bound the checks know, either way."""


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One leaf key of the config, as the reference shows it."""

    key: str
    """Dotted key; `models.N.` stands for any entry of the models list."""
    type: str
    default: str
    """The default's repr; empty for a list of sections (`models`)."""
    accepts: str
    """What the checks accept, in their own words; empty when nothing beyond the type is checked."""
    doc: str


def key_docs(cls: type | None = None) -> list[KeyDoc]:
    """Every leaf key of `cls` (default: `graft.config.Config`), in schema order."""
    if cls is None:
        from graft.config.schema import Config

        cls = Config
    rows = describe(cls)
    return [KeyDoc(key, tp, default, accepts(cls, key), doc) for key, tp, default, doc in rows]


def accepts(cls: type, key: str) -> str:
    """What the checks accept for `key`, from the messages they raise about it."""
    annotation = _annotation(cls, key)
    said: list[str] = []
    for value in _probes(annotation):
        message = _refusal(cls, key, value)
        if message and message not in said:
            said.append(message)
    if any(m.startswith(("in [", "in (")) for m in said):  # an interval says the rest
        said = [m for m in said if m.startswith(("in [", "in ("))]
    return "; ".join(_as_interval(said))


def _as_interval(said: list[str]) -> list[str]:
    """`>= 1 (note)` and `at most 9 (note)`, as the one statement `in [1, 9] (note)`."""
    if len(said) == 2:
        low = re.fullmatch(r">= (\S+)(.*)", said[0])
        high = re.fullmatch(r"at most (\S+)(.*)", said[1])
        if low and high and low.group(2) == high.group(2):
            return [f"in [{low.group(1)}, {high.group(1)}]{low.group(2)}"]
    return said


def _annotation(cls: type, key: str) -> Any:
    """The type annotation of the leaf field `key` (`models.N.x`: the list entry's field)."""
    tp: Any = cls
    for part in key.split("."):
        if part == "N":
            continue
        tp = get_type_hints(tp)[part]
        if get_origin(tp) is tuple and dataclasses.is_dataclass(get_args(tp)[0]):
            tp = get_args(tp)[0]
    return tp


def _probes(tp: Any) -> list[Any]:
    """Values of type `tp` that a check, if there is one, refuses: their messages name the bound."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return _probes(args[0]) if len(args) == 1 else []
    if tp is bool or get_origin(tp) is Literal or dataclasses.is_dataclass(tp):
        return []  # the type itself says what is accepted
    if tp is int:
        return [-HUGE, HUGE]
    if tp is float:
        return [math.nan]
    if tp is str:
        return [""]
    if get_origin(tp) is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return [()]
        if all(a is float for a in args):
            return [tuple(math.nan for _ in args)]
    return []


def _refusal(cls: type, key: str, value: Any) -> str:
    """What the checks say about `key` when it is set to `value` and the rest is valid; empty
    when they accept it or speak of another key first."""
    concrete = key.replace(".N.", ".0.")
    try:
        from_dict(cls, _setting(concrete, value))
    except ConfigError as err:
        text = " ".join(str(err).split())
        if not text.startswith(f"{concrete}: "):
            return ""
        said = text[len(concrete) + 2 :]
        said = re.sub(r",? \(?got .*?\)?$", "", said)  # the probe's value is not the point
        return said.removeprefix("must be ")
    return ""


def _setting(key: str, value: Any) -> dict[str, Any]:
    """A config mapping that sets `key` to `value`, with what makes its checks run: the task
    section's own task chosen (with a training file), LoRA switched on for a LoRA key."""
    data: dict[str, Any] = {}
    parts = key.split(".")
    if parts[0] == "task" and len(parts) == 3:
        data["task"] = {"name": parts[1], parts[1]: {}}
        if parts[2] != "train" and parts[1] in ("math", "code"):
            data["task"][parts[1]]["train"] = "train.jsonl"
    if parts[0] == "models":
        data["models"] = [{}]
        if parts[2] == "lora" and parts[3] != "r":
            data["models"][0]["lora"] = {"r": 8}
    node: Any = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = list(value) if isinstance(value, tuple) else value
    return data
