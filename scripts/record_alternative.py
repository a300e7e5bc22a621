"""Record, in the code-pair study's committed answer (src/graft/evidence/recorded/
code_study.json), the strongest alternative it measured beside GRAFT (SFT on the peer's verified
programs, then GRPO), read from that study's tables in BENCHMARKS.md, so that `make demo` shows
it beside GRAFT's cells. tests/test_demo.py checks the committed file against the tables.

    .venv/bin/python scripts/record_alternative.py
"""

from __future__ import annotations

import json
from pathlib import Path

from graft.evidence.recorded import RECORDED_DIR, alternative_from_benchmarks

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    path = RECORDED_DIR / "code_study.json"
    answer = json.loads(path.read_text())
    answer["alternative"] = alternative_from_benchmarks((ROOT / "BENCHMARKS.md").read_text())
    path.write_text(json.dumps(answer, indent=1) + "\n")
    print(f"wrote {path}: {answer['alternative']['method']}")


if __name__ == "__main__":
    main()
