"""A plug-in code verifier for tests/test_verify_pool.py and tests/test_cost.py that spends a known
amount of CPU where the pool must count it: in the worker itself, in a plain child process and in
a sandboxed program (a grandchild, counted by the sandbox)."""

from __future__ import annotations

import subprocess
import sys
import time

from graft.types import Verdict

SELF_S, CHILD_S, PROGRAM_S = 0.05, 0.1, 0.2
KNOWN_S = SELF_S + CHILD_S + PROGRAM_S
"""CPU seconds one call spends at least."""
_BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"


def burn(response: str, gold: str, problem: str) -> Verdict:
    """Spend KNOWN_S CPU seconds; then the arithmetic verifier's verdict (training goes on)."""
    from graft.verify.code.verifier import verify_code
    from graft.verify.math.grader import verify_final_number

    start = time.process_time()
    while time.process_time() - start < SELF_S:
        pass
    subprocess.run([sys.executable, "-c", _BURN.format(s=CHILD_S)], check=True)
    program = "```python\n" + _BURN.format(s=PROGRAM_S) + "print(1)\n```"
    tests = '{"form": "stdio", "stdin": [""], "stdout": ["1"]}'
    ran = verify_code(program, tests)
    if not ran.correct:
        return Verdict("error", f"the sandboxed burner failed: {ran.detail}")
    return verify_final_number(response, gold)
