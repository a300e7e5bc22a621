"""The verifier pool on Ray (`run.backend: ray`): the local pool's verdicts, a hanging verifier
scored `timeout` and its actor replaced, a dead actor's item scored `error`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from graft.sandbox import isolation_problem
from graft.verify.pool import VerifierPool

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:  # plug-ins import from the driver's sys.path
    sys.path.insert(0, TESTS_DIR)
PLUGIN = "hanging_verifier:check"
TIMEOUT_S = 6.0


def _items() -> list[tuple[str, str, str]]:
    items = [("final_number", f"1+{i}={i + 1}", str(i + 1 + i % 3)) for i in range(40)]
    items += [(PLUGIN, "HANG", "x"), (PLUGIN, "ok", "ok"), (PLUGIN, "RAISE", "x")]
    items += [("math", "\\boxed{\\frac{1}{2}}", "0.5"), ("no_such_module_xyz:f", "a", "a")]
    if not isolation_problem():
        gold = json.dumps({"form": "call", "function": "f", "calls": [[2]], "expected": [4]})
        items += [("code", "```python\ndef f(x):\n    return 2 * x\n```", gold)]
        items += [("code", "```python\ndef f(x):\n    return x\n```", gold)]
    return items


@pytest.mark.slow
def test_the_ray_pool_gives_the_local_pools_verdicts_and_kills_a_hang():
    ray = pytest.importorskip("ray")
    from graft.verify.pool_ray import RayVerifierPool

    items = _items()
    # A fresh worker's first math item imports sympy and math-verify: under a loaded machine
    # that alone can take over a second, so the deadline leaves room for it.
    with VerifierPool(workers=2, timeout_s=TIMEOUT_S) as local:
        want = local.verify(items)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with RayVerifierPool(workers=2, timeout_s=TIMEOUT_S) as pool:
            first = pool.pids
            start = time.monotonic()
            got = pool.verify(items)
            elapsed = time.monotonic() - start
            assert pool.cpu_s > 0
            replaced = set(first) - set(pool.pids)
            crashed = pool.verify([(PLUGIN, "CRASH", "x"), (PLUGIN, "after", "after")])
    finally:
        ray.shutdown()
    assert got == want
    assert got[40].category == "timeout" and "worker killed" in got[40].detail
    assert {v.category for v in got} >= {"correct", "wrong", "timeout", "error"}
    assert elapsed >= TIMEOUT_S  # the hanging item waited out its deadline, then was killed
    assert len(replaced) == 1  # the hanging item's actor, killed and replaced
    assert crashed[0].category == "error" and "Ray actor died" in crashed[0].detail
    assert crashed[1].correct
