"""Runs inside the candidate's sandbox for assert-style tests (standard library only): load
/work/solution.py, say on fd 3 which global names it defines (`exported`), then answer each
request line of fd 4 ({"function", "args", "kwargs"}, in tagged JSON: `values.py`) with one JSON
line on fd 3: the return value in tagged JSON, or the name of the exception. It never sees a
check or an expected value."""

import builtins
import json
import os
import sys
import types
from collections.abc import Iterator

VALUE_BYTES, NAMES_BYTES, ITEMS = 8 << 10, 32 << 10, 4096
PLAIN = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def load_codec() -> dict:
    """values.py's functions (run as a file: `-I` keeps /work off the import path; in a warm
    sandbox, as the code its init compiled once, when the file is the same)."""
    with open("values.py", "rb") as f:
        source = f.read()
    compiled = globals().get("__compiled__", {}).get(("values.py", source))
    space: dict = {"__name__": "values"}
    exec(compiled or compile(source, "values.py", "exec", dont_inherit=True), space)
    return space


def found_at(value, module: str, name: str) -> str | None:
    """The dotted path under which `module` holds `value` itself (its qualified name, or the
    name the solution gave it), or None: a callable instance of an imported class (a partial)
    is not its class."""
    owner = sys.modules.get(module)
    for path in (getattr(value, "__qualname__", None), name):
        obj = owner
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except (AttributeError, TypeError):
            continue
        if owner is not None and obj is value:
            return path
    return None


def describe(name: str, value, codec: dict) -> dict | None:
    """How the checker can have `value` under `name`: a module to import by name, a function or
    class to import from its module, a callable to call here (a proxy), or a small plain value
    (a copy); None for anything else."""
    if isinstance(value, type(sys)):
        return {"module": value.__name__}
    if callable(value):
        module = getattr(value, "__module__", None)
        if isinstance(module, str) and module != "solution":
            path = found_at(value, module, name)
            if path is not None:
                return {"import": module, "qualname": path}
        return {"proxy": True}
    if not isinstance(value, PLAIN) or isinstance(value, Iterator):
        return None
    sized = isinstance(value, list | tuple | dict | set | frozenset | str | bytes)
    if sized and len(value) > ITEMS:
        return None
    data = codec["to_data"](value)
    return {"value": data} if len(json.dumps(data)) <= VALUE_BYTES else None


def exported(namespace: dict, codec: dict) -> dict:
    """The solution's global names the checks may use, as a module's tests would see them: no
    dunder and no name of a builtin (a solution's `abs` never replaces the checks' own)."""
    out, size = {}, 0
    for name, value in list(namespace.items()):
        if name.startswith("__") or hasattr(builtins, name):
            continue
        try:
            described = describe(name, value, codec)
        except BaseException:
            continue
        if described is not None:
            size += len(name) + len(json.dumps(described))
            if size > NAMES_BYTES:
                break
            out[name] = described
    return out


def answer(namespace: dict, codec: dict, line: str) -> str:
    try:
        request = json.loads(line)
        args = codec["from_data"](request["args"])
        kwargs = {k: codec["from_data"](v) for k, v in request.get("kwargs", {}).items()}
        value = namespace[request["function"]](*args, **kwargs)
    except BaseException as exc:
        return json.dumps({"error": type(exc).__name__})
    try:
        return f'{{"value": {codec["encode"](value)}}}'
    except codec["Unencodable"] as exc:
        return json.dumps({"error": f"unencodable: {exc}"})
    except BaseException as exc:  # a value whose own methods raise as it is read
        return json.dumps({"error": f"unencodable: {type(exc).__name__}"})


def load_solution() -> dict:
    """/work/solution.py as the module `solution` (in sys.modules, as an import would leave it:
    dataclasses and pickle look a class's module up there), compiled with its own future flags
    only; its namespace."""
    module = types.ModuleType("solution")
    module.__file__ = os.path.abspath("solution.py")
    sys.modules["solution"] = module
    with open("solution.py", "rb") as f:
        exec(compile(f.read(), "solution.py", "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def main() -> None:
    replies, requests = os.fdopen(3, "w"), os.fdopen(4)
    codec = load_codec()
    try:
        namespace = load_solution()
    except BaseException as exc:
        replies.write(json.dumps({"error": "load:" + type(exc).__name__}) + "\n")
        replies.flush()
        sys.exit(1)
    replies.write(json.dumps({"names": exported(namespace, codec)}) + "\n")
    replies.flush()
    for line in requests:
        replies.write(answer(namespace, codec, line) + "\n")
        replies.flush()


main()
