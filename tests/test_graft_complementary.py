"""Slow: the default demo (one seed, the code pair, GRPO and GRAFT) runs end to end on its tiny
pair, and the exchange is active in both directions (the gate finds candidates and the
paper's weight admits peer responses each way).

One seed makes no claim about learning: whether GRAFT beats GRPO is the study's question
(`graft demo --study`, docs/evidence.md), answered with intervals over seeds in BENCHMARKS.md.
"""

import pytest

from graft.evidence import recorded
from graft.evidence.demo import DemoSettings
from graft.evidence.demo_report import run_demo


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the whole default demo: about 3 minutes on 2 idle cores
def test_default_demo_exchanges_both_ways_on_the_code_pair(tmp_path):
    results = run_demo(tmp_path, DemoSettings.make())
    answer = recorded.load("code_study")
    opening = (tmp_path / "results.md").read_text().split("**This run**")[0]
    assert answer is not None and f"run at commit {answer['commit']}" in opening
    code = results["regimes"]["code"]["compare"]["policies"]
    for receiver, source in (("llama", "qwen"), ("qwen", "llama")):
        report = code[receiver]["methods"]["GRAFT (paper weight)"]["regime"][
            f"{source}->{receiver}"
        ]
        assert report["candidates"] > 0 and report["sent_correct"] > 0, report
        assert report["admitted_correct_share"] > 0, report
    assert set(results["regimes"]) == {"code"}
    assert set(code["llama"]["methods"]) == {"GRPO", "GRAFT (paper weight)"}
