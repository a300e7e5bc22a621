"""Runs inside the checker's sandbox for assert-style tests (standard library only): the checks
of /work/check.json run here, and the candidate's functions are proxies that send each call in
tagged JSON (`values.py`: tuples stay tuples, ints exact...) on fd 3 and read the reply from fd
4; the candidate runs in another sandbox, so no object, frame or patched builtin of it reaches a
check. One JSON line per test goes to fd 5: passed, or its `failure` and an `error` that says
more (`candidate` when the candidate raised, died or answered garbage; `check_error` when the
check itself failed: a NameError or ImportError of its own, a setup that raised, an argument
with no tagged form; `wrong` when the check raised anything else, an AssertionError mostly).

The checks' namespace is built in this order, each step over the last: the global names the
candidate's module defines (its first reply: modules imported here by name, functions and
classes imported from their module when they are importable here, else proxies, small plain
values copied), proxies for the names the tests call that nothing else defines (`expected`), the
problem's trusted `prelude` (HumanEval's prompt: its imports and helpers), `setup`, and last the
entry function's name and `candidate`, bound to the proxy of the entry."""

import builtins
import importlib
import json
import os

NOT_IMPORTED = {"antigravity", "this", "__hello__", "__phello__", "__main__", "idlelib.idle"}


class CandidateError(Exception):
    """The candidate raised, died, or answered with something that is not a reply."""


class CheckError(Exception):
    """The check could not be run as written (the message says why)."""


def load_codec() -> dict:
    """values.py's functions (run as a file: `-I` keeps /work off the import path; in a warm
    sandbox, as the code its init compiled once, when the file is the same)."""
    with open("values.py", "rb") as f:
        source = f.read()
    compiled = globals().get("__compiled__", {}).get(("values.py", source))
    space: dict = {"__name__": "values"}
    exec(compiled or compile(source, "values.py", "exec", dont_inherit=True), space)
    return space


class Link:
    """The line-by-line conversation with the candidate's server."""

    def __init__(self, codec: dict) -> None:
        self.codec = codec
        self.requests, self.replies = os.fdopen(3, "w"), os.fdopen(4)

    def read(self) -> dict:
        line = self.replies.readline()
        if not line:
            raise CandidateError("no answer")
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise CandidateError("not a reply") from None
        if not isinstance(reply, dict):
            raise CandidateError("not a reply")
        if "error" in reply:
            raise CandidateError(str(reply["error"]))
        return reply

    def call(self, function: str, args: tuple, kwargs: dict):
        to_data = self.codec["to_data"]
        try:
            request = {"function": function, "args": to_data(list(args)),
                       "kwargs": {k: to_data(v) for k, v in kwargs.items()}}  # fmt: skip
            line = json.dumps(request, allow_nan=False)
        except (self.codec["Unencodable"], RecursionError, ValueError) as exc:
            raise CheckError(f"unencodable argument ({exc})") from None
        self.requests.write(line + "\n")
        self.requests.flush()
        reply = self.read()
        try:
            return self.codec["from_data"](reply["value"])
        except (KeyError, ValueError, TypeError, RecursionError):
            raise CandidateError("not a reply") from None

    def proxy(self, function: str):
        def call(*args, **kwargs):
            return self.call(function, args, kwargs)

        call.__name__ = call.__qualname__ = function
        return call


def imported(described: dict, name: str):
    """The object a name of the candidate's module stands for, imported here; KeyError when it
    cannot be."""
    module_name = described.get("module") or described.get("import")
    if not isinstance(module_name, str) or module_name in NOT_IMPORTED:
        raise KeyError(name)
    try:
        module = importlib.import_module(module_name)
    except BaseException:
        raise KeyError(name) from None
    if "module" in described:
        return module
    obj = module
    try:
        for part in str(described.get("qualname", "")).split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise KeyError(name) from None
    return obj


def candidate_names(names: dict, link: Link) -> dict:
    """The candidate module's global names as the checks get them (module docstring)."""
    out = {}
    for name, described in names.items():
        if not (isinstance(name, str) and name.isidentifier() and isinstance(described, dict)):
            continue
        if name.startswith("__") or hasattr(builtins, name):
            continue
        try:
            if "value" in described:
                out[name] = link.codec["from_data"](described["value"])
            elif "module" in described or "import" in described:
                try:
                    out[name] = imported(described, name)
                except KeyError:
                    if "import" in described:
                        out[name] = link.proxy(name)
            elif described.get("proxy"):
                out[name] = link.proxy(name)
        except (ValueError, TypeError, RecursionError):
            continue
    return out


def namespace_for(spec: dict, link: Link) -> dict:
    """The checks' namespace; CandidateError when the candidate did not load, CheckError when
    the prelude or setup raised."""
    hello = link.read()
    names = hello.get("names")
    if not isinstance(names, dict):
        raise CandidateError("not a reply")
    namespace = {"__name__": "check", **candidate_names(names, link)}
    for name in spec.get("expected", []):
        namespace.setdefault(name, link.proxy(name))
    for part in ("prelude", "setup"):
        try:
            exec(compile(spec.get(part, ""), part, "exec", dont_inherit=True), namespace)
        except BaseException as exc:
            raise CheckError(f"{part}: {type(exc).__name__} ({str(exc)[:80]})") from None
    if spec["entry"]:
        namespace["candidate"] = namespace[spec["entry"]] = link.proxy(spec["entry"])
    return namespace


def failed(i: int, failure: str, error: str) -> dict:
    return {"i": i, "passed": False, "failure": failure, "error": error}


def run_test(test: str, i: int, namespace: dict) -> dict:
    try:
        exec(compile(test, f"test {i}", "exec", dont_inherit=True), namespace)
        return {"i": i, "passed": True}
    except CandidateError as exc:
        return failed(i, "candidate", str(exc))
    except CheckError as exc:
        return failed(i, "check_error", str(exc))
    except (NameError, ImportError) as exc:
        return failed(i, "check_error", f"{type(exc).__name__} ({str(exc)[:80]})")
    except BaseException as exc:
        return failed(i, "wrong", type(exc).__name__)


def main() -> None:
    results = os.fdopen(5, "w")
    link = Link(load_codec())
    with open("check.json") as f:
        spec = json.load(f)
    try:
        namespace = namespace_for(spec, link)
    except (CandidateError, CheckError) as exc:
        kind = "candidate" if isinstance(exc, CandidateError) else "check_error"
        namespace, failure = None, (kind, str(exc))
    for i, test in enumerate(spec["tests"]):
        outcome = failed(i, *failure) if namespace is None else run_test(test, i, namespace)
        results.write(json.dumps(outcome) + "\n")
        results.flush()


main()
