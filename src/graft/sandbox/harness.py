"""Runs inside the sandbox (standard library only): load /work/solution.py, call one function
with each argument list of /work/calls.json, and write one JSON line per call on fd 3: the
return value in tagged JSON (`values.py`, staged beside this file), or the name of the exception
(`unencodable: <type>` for a value with no tagged form, and for an iterator, which no expected
value, being JSON, could equal). No expected value is ever here: the caller compares outside,
so whatever the solution patches or fakes, it can only give values."""

import json
import os
import sys
from collections.abc import Iterator


def load_codec() -> dict:
    """values.py's functions (run as a file: `-I` keeps /work off the import path)."""
    space: dict = {"__name__": "values"}
    with open("values.py") as f:
        exec(compile(f.read(), "values.py", "exec"), space)
    return space


def main() -> None:
    channel = os.fdopen(3, "w")
    codec = load_codec()
    with open("calls.json") as f:
        spec = json.load(f)
    namespace = {"__name__": "solution"}
    try:
        with open("solution.py") as f:
            exec(compile(f.read(), "solution.py", "exec"), namespace)
    except BaseException as exc:
        channel.write(json.dumps({"load_error": type(exc).__name__}) + "\n")
        channel.flush()
        sys.exit(1)
    function = namespace.get(spec["function"])
    for i, args in enumerate(spec["calls"]):
        try:
            if not callable(function):
                raise NameError(spec["function"])
            value = function(*args)
        except BaseException as exc:
            line = json.dumps({"i": i, "error": type(exc).__name__})
        else:
            try:
                if isinstance(value, Iterator):  # equals no expected (JSON) value
                    raise codec["Unencodable"](type(value).__name__)
                line = f'{{"i": {i}, "value": {codec["encode"](value)}}}'
            except codec["Unencodable"] as exc:
                line = json.dumps({"i": i, "error": f"unencodable: {exc}"})
            except BaseException as exc:  # a value whose own methods raise as it is read
                line = json.dumps({"i": i, "error": f"unencodable: {type(exc).__name__}"})
        channel.write(line + "\n")
        channel.flush()


main()
