"""The paper's evaluation suites through the real loading code, with `datasets.load_dataset`
replaced by a stand-in that serves small local Parquet files holding each hub dataset's real
columns and value types (AMC answers are floats, AIME answers strings like "025", Minerva golds
in e-notation and NumPy syntax). Also: pinned revisions, the task's column settings for local
files, one-line hub errors, and the evaluation guide's `graft eval ... --suite paper` run to the
end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

datasets = pytest.importorskip("datasets")

from graft.cli import main  # noqa: E402
from graft.config import MathDataConfig, TaskConfig  # noqa: E402
from graft.errors import DataError  # noqa: E402
from graft.eval.suites import BENCHMARKS, GROUPS, load_suites  # noqa: E402
from graft.verify.golds import check_golds  # noqa: E402
from graft.verify.math.grader import verify_math  # noqa: E402
from graft.verify.pool import VerifierPool  # noqa: E402

LONG = "A star of radius R emits as a black body at temperature T. " * 6

# Per suite: the hub's columns with their types, and rows (gold, a right and a wrong answer).
HUB = {
    "HuggingFaceH4/MATH-500": {
        "schema": [
            ("problem", pa.string()),
            ("solution", pa.string()),
            ("answer", pa.string()),
            ("subject", pa.string()),
            ("level", pa.int64()),
            ("unique_id", pa.string()),
        ],
        "rows": [
            (
                "Convert $(0,3)$ to polar.",
                "\\left( 3, \\frac{\\pi}{2} \\right)",
                "(3, \\pi/2)",
                "(3, \\pi)",
            ),
            ("Simplify $p - q$.", "p - q", "-q + p", "q - p"),
            ("Find $x$.", "\\frac{14}{3}", "4\\frac{2}{3}", "\\frac{13}{3}"),
            ("What time is it?", "9:05", "9:05", "9:50"),
        ],
    },
    "HuggingFaceH4/aime_2024": {
        "schema": [
            ("id", pa.int64()),
            ("problem", pa.string()),
            ("solution", pa.string()),
            ("answer", pa.string()),
            ("url", pa.string()),
            ("year", pa.string()),
        ],
        "rows": [
            ("Find the number of minutes.", "204", "204", "240"),
            ("Find $m+n$.", "025", "25", "52"),
            ("Find the remainder.", "033", "33", "3"),
        ],
    },
    "math-ai/aime25": {
        "schema": [("problem", pa.string()), ("answer", pa.string()), ("id", pa.string())],
        "rows": [
            ("Find the sum of all integer bases $b>9$.", "70", "70", "7"),
            ("Find the number of pairs.", "117", "117", "118"),
            ("Find $p+q$.", "588", "588", "858"),
        ],
    },
    "math-ai/amc23": {
        "schema": [
            ("id", pa.int64()),
            ("question", pa.string()),
            ("answer", pa.float64()),
            ("url", pa.string()),
        ],
        "rows": [
            ("How many miles from City A?", 27.0, "27", "72"),
            ("What is $m+n$?", 3.0, "3", "4"),
            ("Find the area.", 0.5, "\\frac{1}{2}", "\\frac{1}{3}"),
        ],
    },
    "math-ai/minervamath": {
        "schema": [("question", pa.string()), ("answer", pa.string())],
        "rows": [
            ("Find the luminosity in erg/s.", "4.5e33", "4.5 \\times 10^{33}", "403.66"),
            (LONG + "Find the angle.", "np.arcsin(10/13)", "\\arcsin(10/13)", "\\arccos(10/13)"),
            ("Find the ratio.", "-1./3", "-\\frac{1}{3}", "\\frac{1}{3}"),
            ("Name the two levels.", "E_{1},E_{2}", "E_{1}, E_{2}", "E_{1}"),
            ("Find the wavelength in m.", "6e-7", "6 \\times 10^{-7}", "6 \\times 10^{7}"),
        ],
    },
}


def _row(schema, problem, gold, index) -> dict:
    values = {"problem": problem, "question": problem, "answer": gold}
    out = {}
    for column, kind in schema:
        if column in values:
            out[column] = values[column]
        elif kind == pa.int64():
            out[column] = index
        else:
            out[column] = f"{column} {index}"
    return out


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A stand-in for `datasets.load_dataset` serving local Parquet look-alikes of the hub
    datasets; it refuses a wrong split or revision as the hub would. Returns the calls."""
    files = {}
    for name, spec in HUB.items():
        schema = pa.schema(spec["schema"])
        rows = [_row(spec["schema"], p, g, i) for i, (p, g, _, _) in enumerate(spec["rows"])]
        path = tmp_path / "hub" / f"{name.replace('/', '__')}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        files[name] = path
    pinned = {b.dataset: b for b in BENCHMARKS.values()}
    real_load = datasets.load_dataset
    calls = []

    def load_dataset(name, subset=None, *, split, revision=None, **kw):
        calls.append((name, split, revision))
        if name not in files:
            raise FileNotFoundError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")
        if split != pinned[name].split:
            raise ValueError(f'Unknown split "{split}". Should be one of [{pinned[name].split}].')
        if revision != pinned[name].revision:
            raise ValueError(f"Revision {revision} does not exist for dataset {name}")
        cache = tmp_path / "hf_cache"
        return real_load("parquet", data_files=str(files[name]), split="train", cache_dir=cache)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=1, timeout_s=10.0) as p:
        yield p


@pytest.mark.parametrize("suite", list(BENCHMARKS))
def test_paper_suite_loads_parses_and_scores(suite, hub, pool):
    (loaded,) = load_suites([suite])
    bench = BENCHMARKS[suite]
    rows = HUB[bench.dataset]["rows"]
    assert loaded.name == suite and len(loaded.problems) == len(rows)
    assert hub == [(bench.dataset, bench.split, bench.revision)]
    assert loaded.source == {
        "dataset": bench.dataset,
        "split": bench.split,
        "revision": bench.revision,
    }
    for problem, (text, gold, _, _) in zip(loaded.problems, rows, strict=True):
        assert problem.prompt.startswith(text) and problem.prompt.endswith("\\boxed{}.")
        assert problem.gold == str(gold)  # AMC floats become text: "27.0"
    check = check_golds(pool, "math", loaded.problems, where=suite)
    assert check.bad == ()  # every gold parses
    for problem, (_, _, right, wrong) in zip(loaded.problems, rows, strict=True):
        response = f"So the answer is $\\boxed{{{right}}}$."
        assert verify_math(response, problem.gold).category == "correct", (problem.gold, right)
        assert verify_math(f"\\boxed{{{wrong}}}", problem.gold).category == "wrong", wrong


def test_paper_group_is_the_five_benchmarks(hub):
    suites = load_suites(["paper"], limit=2)
    assert [s.name for s in suites] == list(GROUPS["paper"]) == list(BENCHMARKS)
    assert all(len(s.problems) == 2 for s in suites)


def test_hub_failures_are_one_line_with_the_way_out(hub, monkeypatch):
    monkeypatch.setitem(
        BENCHMARKS,
        "math500",
        BENCHMARKS["math500"].__class__("nobody/gone", "test", "a", "b", "1" * 40),
    )
    with pytest.raises(DataError) as info:
        load_suites(["math500"])
    message = str(info.value)
    assert "\n" not in message
    assert "'nobody/gone'" in message and f"revision {'1' * 40}" in message
    assert "HF_DATASETS_OFFLINE=1" in message and ".jsonl" in message


def test_without_the_datasets_package_the_error_is_one_line(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError) as info:
        load_suites(["minerva"])
    message = str(info.value)
    assert "\n" not in message
    assert "pip install 'datasets" in message and "pip install -e '.[datasets]'" in message


def test_local_file_suites_use_the_task_columns(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"question": "1+1?", "solution": "so \\boxed{2}"}) + "\n")
    task = TaskConfig(
        name="math",
        math=MathDataConfig(
            train=str(data),
            problem_column="question",
            answer_column="solution",
            suffix=" Go.",
            limit=1,
        ),
    )
    (suite,) = load_suites([str(data)], task=task)
    assert suite.name == "mine" and suite.problems[0].prompt == "1+1? Go."
    assert suite.problems[0].gold == "2"
    assert suite.source["revision"].startswith("sha256:")
    (fixture,) = load_suites(["fixture"], task=task)  # the shipped file keeps its own columns
    assert len(fixture.problems) > 1 and fixture.problems[0].prompt.endswith(" Go.")


def _stand_in_model(tmp_path: Path) -> Path:
    """A tiny model in a folder named like the evaluation guide's, with a chat template."""
    from graft.models.tiny import build_tiny

    model_dir = tmp_path / "HuggingFaceTB" / "SmolLM2-135M-Instruct"
    shutil.copytree(build_tiny("llama-char-add"), model_dir)
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = (
        "{% for m in messages %}U:{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}"
        "A:{% endif %}"
    )
    config_path.write_text(json.dumps(config))
    return model_dir


def test_readme_paper_command_runs_to_the_end(hub, tmp_path, capsys):
    model = _stand_in_model(tmp_path)
    out = tmp_path / "eval"
    args = ["eval", "--model", str(model), "--chat-template", "--suite", "paper"]
    args += ["--k", "1", "--runs", "1", "--max-new-tokens", "8", "--workers", "1"]
    args += ["--max-prompt-tokens", "200", "--out", str(out)]
    assert main(args) == 0
    result = json.loads((out / "eval.json").read_text())
    datasets_info = result["settings"]["datasets"]
    assert sorted(datasets_info) == sorted(BENCHMARKS)
    for name, bench in BENCHMARKS.items():
        assert datasets_info[name]["revision"] == bench.revision
        assert datasets_info[name]["unparseable_golds"] == 0
    assert datasets_info["minerva"]["long_prompts_skipped"] == 1
    assert datasets_info["amc23"]["long_prompts_skipped"] == 0
    (entry,) = result["models"].values()
    assert entry["suites"]["minerva"]["problems"] == len(HUB["math-ai/minervamath"]["rows"]) - 1
    assert "1 of 5 prompts are longer than 200 tokens" in capsys.readouterr().out
    text = (out / "eval.md").read_text()
    assert "## Verdicts" in text and "| model | suite | refused golds |" in text
    for name in BENCHMARKS:  # every stand-in's golds parse: 0 refused, shown per suite
        problems = entry["suites"][name]["problems"]
        assert f"| {name} | 0 of {problems} |" in text
    # 8 new tokens cannot hold a boxed answer: every response is counted under a reason
    reasons = entry["suites"]["math500"]["verdict_reasons"]
    assert sum(reasons.values()) == entry["suites"]["math500"]["problems"]


def test_max_prompt_tokens_must_be_positive(capsys):
    assert main(["eval", "--model", "tiny:llama-char-add", "--max-prompt-tokens", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "graft: error: graft eval --max-prompt-tokens: must be at least 1, got 0"


def test_every_pin_is_a_full_commit_hash_and_a_short_one_is_refused():
    from graft.eval.suites import BENCHMARKS, HubBenchmark

    for name, bench in BENCHMARKS.items():
        assert len(bench.revision) == 40, name
    with pytest.raises(ValueError, match=r"math-ai/amc23: revision '80815d3' is not a full commit"):
        HubBenchmark("math-ai/amc23", "test", "question", "answer", "80815d3")


def test_the_evaluation_guides_suite_table_matches_the_stand_ins():
    """docs/guides/evaluation.md's table: each suite's dataset, the start of its pinned hash, and
    its stand-in's gold count (test_readme_paper_command_runs_to_the_end checks that none is
    refused)."""
    guide = Path(__file__).resolve().parents[1] / "docs" / "guides" / "evaluation.md"
    text = guide.read_text()
    for name, bench in BENCHMARKS.items():
        rows = len(HUB[bench.dataset]["rows"])
        row = f"| `{name}` | `{bench.dataset}` @ `{bench.revision[:8]}` | 0 of {rows} |"
        assert row in text, row
