"""`graft code audit`: score (problem, response) pairs through the code sandbox, one verdict per
row, so test sets and the sandbox can be audited on hostile cases before training."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "code",
        help="code tasks: audit responses against their tests in the sandbox",
        description="Tools for code problems (graft.tasks.code).",
    )
    inner = p.add_subparsers(dest="code_command", metavar="COMMAND", required=True)
    audit = inner.add_parser(
        "audit",
        help="score a JSONL/Parquet file of (problem, response) rows in the sandbox",
        description="Each row holds a problem in any layout graft reads (graft, MBPP, HumanEval, "
        "TACO, LiveCodeBench) and a `response` column (text holding a fenced Python block). "
        "Writes one JSON line per row (row, verdict, reason, detail) to --out and prints the "
        "counts. Needs the sandbox (Linux namespaces and cgroups).",
    )
    audit.add_argument("file", metavar="FILE", help="a .jsonl or .parquet file")
    audit.add_argument("--out", required=True, help="the JSONL file of verdicts to write")
    audit.add_argument(
        "--response-column", default="response", help="the column holding the response"
    )
    audit.set_defaults(handler=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    import json
    from collections import Counter
    from pathlib import Path

    from graft.config import ConfigError
    from graft.errors import DataError
    from graft.preflight import check_output_file, replaced_atomically, resolved
    from graft.sandbox import isolation_problem
    from graft.tasks.code import CodeTestError, code_reason, verify_code
    from graft.tasks.code_data import normalize, read_rows

    source, out = resolved(args.file, "FILE"), resolved(args.out, "--out")
    if not source.is_file():
        raise FileNotFoundError(f"FILE: not found: {source}")
    check_output_file(out, "--out")
    if out.resolve() == source.resolve():
        raise DataError(f"--out {out}: is FILE itself; name another file")
    if isolation_problem():
        raise ConfigError(f"graft code audit: no sandbox on this machine: {isolation_problem()}")
    rows = []
    for n, row in read_rows(source):  # every row checked before any program runs
        where = f"row {n} of {source}"
        response = row.get(args.response_column)
        if not isinstance(response, str):
            raise DataError(f"{where}: no text in column {args.response_column!r}")
        try:
            problem = normalize(row)
        except (CodeTestError, KeyError, TypeError, ValueError, SyntaxError) as err:
            raise DataError(f"{where}: {err}") from None
        rows.append((n, problem, response))
    counts: Counter[str] = Counter()
    with replaced_atomically(out) as tmp, tmp.open("w") as f:
        for n, problem, response in _progress(rows):
            verdict = verify_code(response, problem.tests.to_gold(), problem.prompt)
            reason = code_reason(verdict)
            counts[f"{verdict.category}/{reason}" if reason else verdict.category] += 1
            record = {"row": n, "verdict": verdict.category, "reason": reason}
            f.write(json.dumps({**record, "detail": verdict.detail}) + "\n")
    print(
        f"{len(rows)} rows of {source}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    print(f"wrote {Path(out)}")
    return 0


def _progress(rows: list):
    from tqdm import tqdm

    return tqdm(rows, desc="audit", unit="row", leave=False)
