"""Runs inside the checker's sandbox for assert-style tests (standard library only): the checks
of /work/check.json run here, and the function under test is a proxy that sends each call as JSON
on fd 3 and reads the reply from fd 4; the candidate runs in another sandbox, so no object, frame
or patched builtin of it reaches a check. One JSON line per test goes to fd 5."""

import json
import os


class CandidateError(Exception):
    """The candidate raised, died, or answered with something that is not a reply."""


def main() -> None:
    requests, replies, results = os.fdopen(3, "w"), os.fdopen(4), os.fdopen(5, "w")
    with open("check.json") as f:
        spec = json.load(f)

    def proxy(*args):
        requests.write(json.dumps({"function": spec["entry"], "args": list(args)}) + "\n")
        requests.flush()
        line = replies.readline()
        if not line:
            raise CandidateError("no answer")
        try:
            reply = json.loads(line)
            if "value" in reply:
                return reply["value"]
            raise CandidateError(str(reply["error"]))
        except (ValueError, KeyError, TypeError):
            raise CandidateError("not a reply") from None

    namespace = {"__name__": "check", "candidate": proxy, spec["entry"]: proxy}
    exec(compile(spec.get("setup", ""), "setup", "exec"), namespace)
    for i, test in enumerate(spec["tests"]):
        try:
            exec(compile(test, f"test {i}", "exec"), namespace)
            outcome = {"i": i, "passed": True}
        except CandidateError as exc:
            outcome = {"i": i, "passed": False, "error": f"candidate: {exc}"}
        except BaseException as exc:
            outcome = {"i": i, "passed": False, "error": type(exc).__name__}
        results.write(json.dumps(outcome) + "\n")
        results.flush()


main()
