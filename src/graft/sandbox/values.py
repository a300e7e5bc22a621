"""Python values as tagged JSON, so that they keep their types between two processes (the
candidate's sandbox, the checker's sandbox and graft): standard library only, because the
sandboxed scripts `exec` this file (graft is not importable there).

JSON's own null, true/false, strings, floats and ints up to 2**63 stand for themselves, and a JSON
array is a list; every other value is an object with one key, `~`, naming its type, and `v`:
- `{"~": "tuple", "v": [...]}`, likewise `set`, `frozenset`, `iter` (an iterator, read to its
  end, given back as an iterator over the values);
- `{"~": "dict", "v": [[key, value], ...]}` (any keys, in their order);
- `{"~": "int", "v": "-0x..."}` (ints of 2**63 and more, in hex: no digit limit applies);
- `{"~": "float", "v": "nan" | "inf" | "-inf"}`; `{"~": "complex", "v": [real, imag]}`;
- `{"~": "bytes", "v": "<base64>"}`, likewise `bytearray`; `{"~": "range", "v": [start, stop,
  step]}`.
A subclass is written as its base type (a namedtuple as a tuple, an IntEnum as an int). Anything
else (functions, class instances, cycles, nesting deeper than the recursion limit) raises
`Unencodable`; `decode` raises ValueError on anything `encode` would not write, and only ever
builds the built-in types above.
"""

import base64
import json
from collections.abc import Iterator
from typing import Any

_BIG = 1 << 63
_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class Unencodable(TypeError):
    """A value with no tagged JSON form (the message is its type's name)."""


def _tag(name: str, value: Any) -> dict:
    return {"~": name, "v": value}


def _float(x: float) -> Any:
    if x != x:
        return _tag("float", "nan")
    if x in (float("inf"), float("-inf")):
        return _tag("float", "inf" if x > 0 else "-inf")
    return float(x)


def to_data(x: Any) -> Any:
    """`x` as JSON-ready data (module docstring); Unencodable names what cannot be written."""
    if x is None or x is True or x is False:
        return x
    if isinstance(x, int):
        x = int.__index__(x)
        return x if -_BIG < x < _BIG else _tag("int", hex(x))
    if isinstance(x, float):
        return _float(x)
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, list):
        return [to_data(v) for v in x]
    if isinstance(x, tuple):
        return _tag("tuple", [to_data(v) for v in x])
    if isinstance(x, dict):
        return _tag("dict", [[to_data(k), to_data(v)] for k, v in dict.items(x)])
    if isinstance(x, frozenset):
        return _tag("frozenset", [to_data(v) for v in x])
    if isinstance(x, set):
        return _tag("set", [to_data(v) for v in x])
    if isinstance(x, complex):
        return _tag("complex", [_float(x.real), _float(x.imag)])
    if isinstance(x, bytes | bytearray):
        name = "bytearray" if isinstance(x, bytearray) else "bytes"
        return _tag(name, base64.b64encode(bytes(x)).decode("ascii"))
    if isinstance(x, range):
        return _tag("range", [x.start, x.stop, x.step])
    if isinstance(x, Iterator):
        return _tag("iter", [to_data(v) for v in x])
    raise Unencodable(type(x).__name__)


def encode(x: Any) -> str:
    """One line of tagged JSON for `x` (no newline in it)."""
    try:
        return json.dumps(to_data(x), allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise Unencodable(f"{type(x).__name__} nested too deep (or a cycle)") from None


def _number(v: Any) -> float:
    if isinstance(v, dict) and v.get("~") == "float" and v.get("v") in _FLOATS:
        return _FLOATS[v["v"]]
    if isinstance(v, float | int) and not isinstance(v, bool):
        return float(v)
    raise ValueError(f"not a float: {v!r:.40}")


def _items(v: Any) -> list:
    if not isinstance(v, list):
        raise ValueError("a tagged container holds a list")
    return [from_data(x) for x in v]


def _tagged(name: str, v: Any) -> Any:
    if name in ("tuple", "set", "frozenset", "iter"):
        items = _items(v)
        return {"tuple": tuple, "set": set, "frozenset": frozenset, "iter": iter}[name](items)
    if name == "dict":
        if not all(isinstance(kv, list) and len(kv) == 2 for kv in v):
            raise ValueError("a dict is a list of [key, value] pairs")
        return {from_data(k): from_data(x) for k, x in v}
    if name == "int" and isinstance(v, str):
        return int(v, 16)
    if name == "float":
        return _number({"~": "float", "v": v})
    if name == "complex" and isinstance(v, list) and len(v) == 2:
        return complex(_number(v[0]), _number(v[1]))
    if name in ("bytes", "bytearray") and isinstance(v, str):
        raw = base64.b64decode(v.encode("ascii"), validate=True)
        return bytearray(raw) if name == "bytearray" else raw
    ints = isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in v)
    if name == "range" and ints and len(v) == 3:
        return range(*v)
    raise ValueError(f"not a tagged value: {name!r:.40}")


def from_data(v: Any) -> Any:
    """The value `to_data` wrote; ValueError (or TypeError, for an unhashable set member or
    key) for anything else."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list):
        return [from_data(x) for x in v]
    if isinstance(v, dict) and set(v) == {"~", "v"} and isinstance(v["~"], str):
        return _tagged(v["~"], v["v"])
    raise ValueError(f"not a tagged value: {v!r:.60}")


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a float that JSON cannot write is tagged)")


def decode(text: str) -> Any:
    """The value of one line `encode` wrote; ValueError for anything else."""
    try:
        return from_data(json.loads(text, parse_constant=_refuse))
    except RecursionError:
        raise ValueError("nested too deep") from None
    except TypeError as err:
        raise ValueError(f"not a value: {err}") from None
