"""Runs inside the candidate's sandbox for assert-style tests (standard library only): load
/work/solution.py, then answer each request line of fd 4 ({"function", "args"}) with one JSON
line on fd 3: the return value as plain data, or the name of the exception. It never sees a
check or an expected value."""

import json
import os
import sys


def main() -> None:
    replies, requests = os.fdopen(3, "w"), os.fdopen(4)
    namespace = {"__name__": "solution"}
    try:
        with open("solution.py") as f:
            exec(compile(f.read(), "solution.py", "exec"), namespace)
    except BaseException as exc:
        replies.write(json.dumps({"error": "load:" + type(exc).__name__}) + "\n")
        replies.flush()
        sys.exit(1)
    for line in requests:
        try:
            request = json.loads(line)
            reply = json.dumps({"value": namespace[request["function"]](*request["args"])})
        except BaseException as exc:
            reply = json.dumps({"error": type(exc).__name__})
        replies.write(reply + "\n")
        replies.flush()


main()
