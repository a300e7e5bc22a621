"""Runs inside the sandbox (standard library only): load /work/solution.py, call one function
with each argument list of /work/calls.json, and write one JSON line per call on fd 3: the
return value as plain data, or the name of the exception. No expected value is ever here: the
caller compares outside, so whatever the solution patches or fakes, it can only give values."""

import json
import os
import sys


def main() -> None:
    channel = os.fdopen(3, "w")
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
            line = json.dumps({"i": i, "value": function(*args)}, allow_nan=True)
        except BaseException as exc:
            line = json.dumps({"i": i, "error": type(exc).__name__})
        channel.write(line + "\n")
        channel.flush()


main()
