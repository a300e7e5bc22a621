"""`graft code audit`: score (problem, response) pairs through the code sandbox, one verdict per
row, so test sets and the sandbox can be audited on hostile cases before training.

Rows are verified in parallel by the verifier pool training uses (`graft.verify.pool`), with the
same per-item deadlines, so the audit and training give the same verdict. Each verdict is written
to OUT.partial as it arrives (completion order, one flushed JSON line each), so a killed audit
leaves every finished row there; once every row is done, OUT is written in row order and
OUT.partial removed. OUT itself only ever appears complete.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ID_COLUMNS = ("task_id", "id", "problem_id", "question_id")
"""The columns that name a row's problem, first found first: HumanEval's and MBPP's `task_id`,
else `id`, `problem_id` (TACO/APPS), `question_id` (LiveCodeBench)."""


@dataclass(frozen=True)
class AuditRow:
    """One row to audit: its number in FILE (from 1), its problem id, problem and response."""

    row: int
    id: str | int | None
    problem: Any  # graft.tasks.code_data.CodeProblem (imported when the command runs)
    response: str


AUDIT_DESCRIPTION = (
    "Each row holds a problem in any layout graft reads (graft, MBPP, HumanEval, TACO, "
    "LiveCodeBench) and a `response` column (text holding a fenced Python block). Every row is "
    "checked before any program runs; the rows are then verified in parallel by --workers "
    "processes of the verifier pool training uses, with its per-response deadline (--timeout-s, "
    "or a code problem's time budget when larger), so a verdict here is the verdict training "
    "gives. Each verdict is written to OUT.partial as it arrives, one JSON line per row (row, id, "
    "verdict, reason, detail; id from the first of the columns task_id, id, problem_id, "
    "question_id the row has, else null), so an audit that is killed leaves every finished row "
    "there (an OUT.partial left by an earlier audit is replaced). When every row is done, OUT is "
    "written in row order, OUT.partial is removed and the counts are printed; OUT is never "
    "half-written. Needs the sandbox (Linux namespaces and cgroups)."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "code",
        help="code tasks: audit responses against their tests in the sandbox",
        description="Tools for code problems (graft.verify.code.verifier).",
    )
    inner = p.add_subparsers(dest="code_command", metavar="COMMAND", required=True)
    audit = inner.add_parser(
        "audit",
        help="score a JSONL/Parquet file of (problem, response) rows in the sandbox",
        description=AUDIT_DESCRIPTION,
    )
    audit.add_argument("file", metavar="FILE", help="a .jsonl or .parquet file")
    audit.add_argument(
        "--out", required=True, help="the JSONL file of verdicts to write (OUT.partial meanwhile)"
    )
    audit.add_argument(
        "--response-column", default="response", help="the column holding the response"
    )
    audit.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="verifier processes working in parallel (default: as many as this machine has cores)",
    )
    audit.add_argument(
        "--timeout-s",
        type=float,
        default=5.0,
        help="per-response deadline, as training's verify.timeout_s (default 5); a code "
        "problem's time budget (its tests' wall clock) applies when larger",
    )
    audit.set_defaults(handler=run_audit)
    doctor = inner.add_parser(
        "doctor",
        help="the sandbox's isolation tier here, and each limit and defence: enforced or weaker",
        description="Prints the isolation tier code programs get on this machine (cgroup_v2, "
        "cgroup_v1, or namespaces with a watch, which is weaker), then each limit and each "
        "defence (the programs' host uid, /proc's mode, their own namespaces and keyring, the "
        "seccomp filter, capabilities, the init's limits, where results come from, memory "
        "returned) as enforced or weaker, with how or why, read off what a real program sees "
        "where it can be, and one real program's result. GRAFT_SANDBOX_TIER caps the tier; "
        "GRAFT_SANDBOX_CGROUP names a delegated cgroup v2 directory; GRAFT_SANDBOX_UID the "
        "programs' host uid where graft runs as root. Exits 1 where programs cannot be "
        "isolated, with what is missing and how to get it.",
    )
    doctor.add_argument("--json", action="store_true", help="the report as JSON")
    doctor.set_defaults(handler=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    import json

    from graft.sandbox.doctor import render, report

    found = report()
    print(json.dumps(found, indent=2) if args.json else render(found))
    return 1 if found["problem"] else 0


def run_audit(args: argparse.Namespace) -> int:
    import json
    from collections import Counter

    from graft.config import ConfigError
    from graft.errors import DataError
    from graft.preflight import check_output_file, not_a_file, replaced_atomically, resolved
    from graft.sandbox import isolation_problem
    from graft.verify.pool import VerifierPool

    source, out = resolved(args.file, "FILE"), resolved(args.out, "--out")
    if not source.is_file():
        kind = not_a_file(source)
        if kind:
            raise DataError(f"FILE {source}: is {kind}, not a file of responses (.jsonl)")
        raise FileNotFoundError(f"FILE: not found: {source}")
    partial = out.with_name(f"{out.name}.partial")
    written = {out: "is", partial: "its OUT.partial would be"}
    written[out.with_name(f"{out.name}.tmp")] = "its OUT.tmp would be"
    for path, what in written.items():
        check_output_file(path, "--out")
        if path.resolve() == source.resolve():
            raise DataError(f"--out {out}: {what} FILE itself; name another file")
    if args.workers < 1:
        raise ConfigError(f"graft code audit --workers: must be at least 1, got {args.workers}")
    if not args.timeout_s > 0:
        raise ConfigError(f"graft code audit --timeout-s: must be > 0, got {args.timeout_s}")
    if isolation_problem():
        raise ConfigError(f"graft code audit: no sandbox on this machine: {isolation_problem()}")
    rows = _read(source, args.response_column)
    counts: Counter[str] = Counter()
    records: list[dict[str, Any]] = []
    items = [("code", r.response, r.problem.tests.to_gold(), r.problem.prompt) for r in rows]
    pool = VerifierPool(workers=args.workers, timeout_s=args.timeout_s)
    with pool, partial.open("w") as f:
        try:
            for record in _records(pool.verify_iter(items), rows):
                f.write(json.dumps(record) + "\n")
                f.flush()  # a killed audit leaves every finished row
                records.append(record)
                r = record["reason"]
                counts[f"{record['verdict']}/{r}" if r else record["verdict"]] += 1
        except KeyboardInterrupt:
            raise KeyboardInterrupt(
                f"interrupted; the {len(records)} verdicts so far are in {partial}"
            ) from None
    with replaced_atomically(out) as tmp_out:
        lines = (json.dumps(r) + "\n" for r in sorted(records, key=lambda r: r["row"]))
        tmp_out.write_text("".join(lines))
    partial.unlink()
    print(
        f"{len(rows)} rows of {source}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    print(f"wrote {Path(out)}")
    return 0


def _read(source: Path, column: str) -> list[AuditRow]:
    """Every row, each checked before any program runs; DataError names the row."""
    from graft.errors import DataError
    from graft.tasks.code_data import normalize, read_rows
    from graft.verify.code.verifier import CodeTestError

    rows = []
    for n, row in read_rows(source):
        where = f"row {n} of {source}"
        response = row.get(column)
        if not isinstance(response, str):
            raise DataError(f"{where}: no text in column {column!r}")
        try:
            problem = normalize(row)
        except (CodeTestError, KeyError, TypeError, ValueError, SyntaxError) as err:
            raise DataError(f"{where}: {err}") from None
        rows.append(AuditRow(n, row_id(row), problem, response))
    return rows


def row_id(row: dict[str, Any]) -> str | int | None:
    """The row's problem id: the first of `ID_COLUMNS` it has (a number stays a number)."""
    for key in ID_COLUMNS:
        value = row.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return str(value)
    return None


def _records(verdicts: Iterable[tuple[int, Any]], rows: list[AuditRow]) -> Iterator[dict[str, Any]]:
    """One record per verdict as it arrives, with a progress bar."""
    from tqdm import tqdm

    with tqdm(total=len(rows), desc="audit", unit="row", leave=False) as bar:
        for i, verdict in verdicts:
            bar.update(1)
            yield {
                "row": rows[i].row,
                "id": rows[i].id,
                "verdict": verdict.category,
                "reason": verdict.reason,
                "detail": verdict.detail,
            }
