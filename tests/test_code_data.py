"""Code problems in the usual layouts (small stand-ins written here, in the columns of MBPP,
HumanEval, TACO and LiveCodeBench), normalized to one form, with references checked at load and
malformed rows refused in one line naming file and row."""

import json

import pytest

from graft.errors import DataError
from graft.sandbox import isolation_problem
from graft.tasks.code import verify_code
from graft.tasks.code_data import check_references, load_code_problems, normalize

needs_sandbox = pytest.mark.skipif(bool(isolation_problem()), reason=isolation_problem() or "ok")

MBPP = {
    "task_id": 2,
    "text": "Write a function to add two numbers.",
    "code": "def add(a, b):\n    return a + b",
    "test_list": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"],
    "test_setup_code": "",
}
HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": 'def add(a, b):\n    """Add a and b."""\n',
    "canonical_solution": "    return a + b\n",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
    "entry_point": "add",
}
TACO_STDIO = {
    "question": "Read two integers and print their sum.",
    "input_output": json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}),
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)"]),
}
TACO_CALL = {
    "question": "Return the largest element.",
    "input_output": json.dumps({"fn_name": "top", "inputs": [[[1, 5, 2]]], "outputs": [[5]]}),
    "solutions": json.dumps(["def top(xs):\n    return min(xs)"]),  # a wrong reference
}
LCB = {
    "question_content": "Print the sum of two integers.",
    "public_test_cases": json.dumps([{"input": "2 2\n", "output": "4\n", "testtype": "stdin"}]),
    "metadata": "{}",
}
GRAFT = {
    "prompt": "Write add(a, b).",
    "tests": {"form": "call", "function": "add", "calls": [[1, 2]], "expected": [3]},
    "reference": "def add(a, b):\n    return a + b",
}


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_every_layout_reads_to_one_form(tmp_path):
    problems = load_code_problems(
        write(tmp_path / "mixed.jsonl", [MBPP, HUMANEVAL, TACO_STDIO, TACO_CALL, LCB, GRAFT]),
        key="task.code.train",
    )
    assert [p.layout for p in problems] == [
        "mbpp", "humaneval", "taco", "taco", "livecodebench", "graft",
    ]  # fmt: skip
    assert [p.tests.form for p in problems] == [
        "assert",
        "assert",
        "stdio",
        "call",
        "stdio",
        "call",
    ]
    assert problems[0].tests.function == "add" and len(problems[0].tests) == 2
    assert problems[3].tests.expected == (5,) and problems[3].tests.calls == (([1, 5, 2],),)


@needs_sandbox
def test_a_reference_that_fails_its_own_tests_is_left_out_and_counted(tmp_path, capsys):
    path = write(tmp_path / "mixed.jsonl", [MBPP, HUMANEVAL, TACO_STDIO, TACO_CALL, LCB, GRAFT])
    kept, counts = check_references(load_code_problems(path, key="k"), where="k")
    assert counts == {"problems": 6, "references_checked": 5, "left_out": 1}
    assert [p.layout for p in kept] == ["mbpp", "humaneval", "taco", "livecodebench", "graft"]
    assert "left out 1 of 5" in capsys.readouterr().err
    # the kept problems' tests judge their references correct, through the verifier
    for problem in kept:
        if problem.reference:
            response = f"```python\n{problem.reference}\n```"
            assert verify_code(response, problem.tests.to_gold()).correct, problem.layout


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "p", "tests": {"form": "call", "calls": [[1]], "expected": [1]}}, "function"),
        ({**MBPP, "test_list": ["x = 1"]}, "no function call"),
        ({**MBPP, "test_list": []}, "test_list is empty"),
        ({"prompt": "p", "tests": {"form": "unit"}}, "form 'unit' is not supported"),
        ({"question": "q", "input_output": "{}"}, "inputs and outputs"),
        ({"title": "no layout"}, "no known layout"),
    ],
)
def test_a_malformed_row_ends_in_one_line_naming_file_and_row(tmp_path, row, message):
    path = write(tmp_path / "bad.jsonl", [GRAFT, row])
    with pytest.raises(DataError, match=message) as err:
        load_code_problems(path, key="task.code.train")
    assert f"row 2 of {path}" in str(err.value) and "\n" not in str(err.value)


@needs_sandbox
def test_graft_code_audit_writes_one_verdict_per_row(tmp_path, capsys):
    from graft.cli import main

    def row(response):
        return {**GRAFT, "response": response}

    rows = [
        row("```python\ndef add(a, b):\n    return a + b\n```"),
        row("```python\ndef add(a, b):\n    return a - b\n```"),
        row("def add(a, b): return a + b"),
        row("```python\nimport os\nos.system('rm -rf /work/..')\nwhile True:\n    pass\n```"),
        {**MBPP, "response": "```python\ndef add(a, b):\n    return a + b\n```"},
    ]
    out = tmp_path / "verdicts.jsonl"
    assert main(["code", "audit", write(tmp_path / "audit.jsonl", rows), "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["row"], g["verdict"], g["reason"]) for g in got] == [
        (1, "correct", ""),
        (2, "wrong", "wrong"),
        (3, "no_answer", "no_answer"),
        (4, "timeout", "timeout"),
        (5, "correct", ""),
    ]
    assert "5 rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("rows", "culprit"),
    [
        ([{**GRAFT, "response": "x"}, GRAFT], "row 2 of"),  # no response
        ([{**GRAFT, "response": "x"}, {**MBPP, "test_list": [], "response": "x"}], "row 2 of"),
    ],
)
def test_graft_code_audit_refuses_a_bad_row_before_running_anything(
    tmp_path, capsys, rows, culprit
):
    from graft.cli import main

    out = tmp_path / "verdicts.jsonl"
    path = write(tmp_path / "audit.jsonl", rows)
    assert main(["code", "audit", path, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graft: error: ") and culprit in err and "\n" not in err
    assert not out.exists()


def _task(tmp_path, **kw):
    from graft.config import CodeDataConfig
    from graft.tasks.code_data import CodeTask

    train = write(tmp_path / "train.jsonl", [GRAFT, MBPP, TACO_CALL])
    test = write(tmp_path / "test.jsonl", [HUMANEVAL])
    return CodeTask(CodeDataConfig(train=train, test=test, **kw))


@needs_sandbox
def test_the_code_task_serves_prompts_and_tests_and_drops_broken_references(tmp_path, capsys):
    task = _task(tmp_path)
    assert task.verifier == "code"
    train, test = task.train_problems(), task.test_problems()
    assert len(train) == 2 and len(test) == 1  # TACO_CALL's reference fails its own tests
    assert train[0].prompt.startswith("Write add(a, b).") and "```python" in train[0].prompt
    assert json.loads(train[1].gold)["form"] == "assert"
    assert "left out 1 of 3" in capsys.readouterr().err


def test_without_isolation_the_code_task_refuses_to_start_in_one_line(tmp_path, monkeypatch):
    import graft.sandbox
    from graft.config import ConfigError

    monkeypatch.setattr(graft.sandbox, "isolation_problem", lambda: "no user namespaces: fix")
    with pytest.raises(ConfigError, match=r"task\.code\.sandbox: cannot isolate") as err:
        _task(tmp_path)
    assert "\n" not in str(err.value)


def test_unsafe_local_warns_and_runs_programs_without_isolation(tmp_path, capsys, monkeypatch):
    import graft.sandbox

    monkeypatch.setattr(graft.sandbox, "isolation_problem", lambda: "none here")
    task = _task(tmp_path, sandbox="unsafe_local", check_references=False)
    assert task.verifier == "code_unsafe_local"
    assert "WITHOUT isolation" in capsys.readouterr().err
    from graft.tasks.verify import resolve_verifier

    verify = resolve_verifier("code_unsafe_local")
    gold = task.train_problems()[0].gold
    assert verify("```python\ndef add(a, b):\n    return a + b\n```", gold).correct
    assert not verify("```python\ndef add(a, b):\n    return a * b\n```", gold).correct
    from graft.sandbox import Limits, call_in_sandbox

    where = "import os\ndef f():\n    return os.getcwd()"
    _, (cwd,) = call_in_sandbox(where, "f", [[]], limits=Limits(unsafe_local=True))
    assert cwd.value != "/work" and "graft-sandbox-" in cwd.value  # the host's own tree


def test_a_dataset_read_through_datasets_normalizes_like_a_file(tmp_path):
    """The rows of a dataset that `datasets` loads (here a local folder in MBPP's layout, as a
    hub copy reads once downloaded) become the same problems as the same rows in a file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from graft.config import CodeDataConfig
    from graft.tasks.math_data import read_hub

    rows = [{"text": "Add two numbers.", "code": "def add(a, b):\n    return a + b",
             "test_list": ["assert add(2, 3) == 5", "assert add(0, 0) == 0"],
             "test_setup_code": ""}]  # fmt: skip
    folder = tmp_path / "mbpp_copy"
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "test-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "same.parquet")
    cfg = CodeDataConfig(train=str(folder), revision="ab" * 20)
    via_datasets = [normalize(row) for _, row in read_hub(str(folder), "test", cfg, "k", ())]
    via_file = load_code_problems(str(tmp_path / "same.parquet"), key="k")
    assert tuple(via_datasets) == via_file and via_file[0].tests.function == "add"
