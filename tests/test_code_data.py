"""Code problems in the usual layouts (small stand-ins written here, in the columns of MBPP,
HumanEval, TACO and LiveCodeBench), normalized to one form, with references checked at load and
malformed rows refused in one line naming file and row."""

import json
from pathlib import Path

import pytest

from graft.errors import DataError
from graft.sandbox import isolation_problem
from graft.tasks.code_data import check_references, load_code_problems, normalize
from graft.verify.code.verifier import verify_code

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
    kept, counts = check_references(
        load_code_problems(path, key="k"), where="k", report=tmp_path / "left.jsonl"
    )
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
        (3, "no_answer", "no_code_block"),
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
    kw.setdefault("left_out_dir", str(tmp_path / "left_out"))
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
    from graft.verify.registry import resolve_verifier

    verify = resolve_verifier("code_unsafe_local")
    gold = task.train_problems()[0].gold
    assert verify("```python\ndef add(a, b):\n    return a + b\n```", gold).correct
    assert not verify("```python\ndef add(a, b):\n    return a * b\n```", gold).correct
    from graft.sandbox import Limits, call_in_sandbox

    where = "import os\ndef f():\n    return os.getcwd()"
    _, (cwd,) = call_in_sandbox(where, "f", [[]], limits=Limits(unsafe_local=True))
    assert cwd.value != "/work" and "graft-local-" in cwd.value  # the host's own tree


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


# ------------------------------------------------------------- the harness of each dataset, kept
SHIFT = {
    "task_id": "HumanEval/50",
    "prompt": "import math\nfrom typing import List\n\n\ndef encode_shift(s: str) -> str:\n"
    "    return ''.join(chr((ord(c) - 97 + 5) % 26 + 97) for c in s)\n\n\n"
    "def decode_shift(words: List[str]) -> List[str]:\n"
    '    """Undo encode_shift on every word."""\n',
    "canonical_solution": "    return [''.join(chr((ord(c) - 97 - 5) % 26 + 97) for c in s)"
    " for s in words]\n",
    "test": "def check(candidate):\n    words = ['abc', 'xyz', 'hello']\n"
    "    assert candidate([encode_shift(w) for w in words]) == words\n"
    "    assert math.isclose(len(words), 3.0)\n",
    "entry_point": "decode_shift",
}  # fmt: skip
ONLY_THE_ENTRY = (
    "```python\ndef decode_shift(words: List[str]) -> List[str]:\n"
    "    return [''.join(chr((ord(c) - 97 - 5) % 26 + 97) for c in s) for s in words]\n```"
)


@needs_sandbox
def test_humaneval_checks_and_programs_run_with_the_prompts_imports_and_helpers():
    """The check calls the prompt's `encode_shift` and uses its `import math`; the response
    rewrites only the entry function, with the prompt's `List`, as HumanEval's harness allows."""
    problem = normalize(SHIFT)
    assert problem.tests.prelude == SHIFT["prompt"] and problem.id == "HumanEval/50"
    gold = problem.tests.to_gold()
    assert verify_code(ONLY_THE_ENTRY, gold).correct
    kept, counts = check_references((problem,), where="k")
    assert counts["left_out"] == 0 and kept == (problem,)
    # the prompt's helper is the check's, whatever the response redefines
    cheat = (
        "```python\ndef encode_shift(s):\n    return s\n"
        "def decode_shift(words):\n    return words\n```"
    )
    assert not verify_code(cheat, gold).correct


def _broken_check(n: int) -> dict:
    test = "def check(candidate):\n    assert candidate(2, 3) == undefined_helper(5)\n"
    return {**HUMANEVAL, "task_id": f"HumanEval/{900 + n}", "test": test}


@needs_sandbox
def test_left_out_references_are_named_by_id_listed_in_full_with_the_failing_feature(
    tmp_path, capsys
):
    rows = [*(_broken_check(n) for n in range(7)), HUMANEVAL,
            {**MBPP, "task_id": 11, "code": "def add(a, b):\n    return a - b"}]  # fmt: skip
    problems = load_code_problems(write(tmp_path / "mixed.jsonl", rows), key="k")
    report = tmp_path / "out" / "left_out.jsonl"
    kept, counts = check_references(problems, where="task.code.train", report=report)
    assert counts == {"problems": 9, "references_checked": 9, "left_out": 8}
    assert [p.id for p in kept] == ["HumanEval/0"]
    err = capsys.readouterr().err
    assert "HumanEval/900 (check_error: NameError" in err and "#" not in err
    assert "check_error 7, wrong 1" in err and f"all listed in {report}" in err
    listed = [json.loads(line) for line in report.read_text().splitlines()]
    assert [f["id"] for f in listed] == [*(f"HumanEval/{900 + n}" for n in range(7)), "11"]
    assert [f["reason"] for f in listed] == ["check_error"] * 7 + ["wrong"]
    assert [f["row"] for f in listed] == [1, 2, 3, 4, 5, 6, 7, 9]
    assert "undefined_helper" in listed[0]["why"]
    # without a path, the list goes to a new file that the warning names
    check_references(problems[:1], where="task.code.test")
    named = capsys.readouterr().err.rsplit("all listed in ", 1)[1].strip()
    assert json.loads(Path(named).read_text())["id"] == "HumanEval/900"
    Path(named).unlink()


MBPP_SET = {
    "task_id": 2,
    "text": "Write a function to find the shared elements from the given two lists.",
    "code": "def similar_elements(test_tup1, test_tup2):\n"
    "  res = tuple(set(test_tup1) & set(test_tup2))\n  return (res) ",
    "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                  "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))"],
    "test_setup_code": "",
}  # fmt: skip
MBPP_MATH = {
    "task_id": 17,
    "text": "Write a function to find the area of a circle.",
    "code": "import math\ndef circle_area(r):\n    return math.pi * r * r",
    "test_list": ["assert math.isclose(circle_area(2), 12.566370614359172, rel_tol=0.001)"],
    "test_setup_code": "",
}


@needs_sandbox
@pytest.mark.parametrize("row", [MBPP_SET, MBPP_MATH], ids=["set-of-call", "solution-import"])
def test_mbpp_tests_run_as_mbpps_harness_runs_them(row):
    """The entry is the reference's `def` that the tests call (not `set`), and the tests see
    the solution module's imports (`math`), judged in their own sandbox all the same."""
    problem = normalize(row)
    assert problem.tests.function == {2: "similar_elements", 17: "circle_area"}[row["task_id"]]
    _, counts = check_references((problem,), where="k")
    assert counts["left_out"] == 0
    response = f"Solution:\n```python\n{row['code']}\n```\nUsage:\n```python\nprint(1)\n```"
    assert verify_code(response, problem.tests.to_gold()).correct


def test_without_a_reference_the_entry_is_the_one_name_the_tests_call_that_nothing_defines():
    assert normalize({**MBPP_SET, "code": None}).tests.function == "similar_elements"
    two = {**MBPP, "code": None, "test_list": ["assert f(g(1)) == 2", "x = 3\nassert f(x) == 3"]}
    assert normalize(two).tests.function == ""  # any of f, g that the response defines


@needs_sandbox
def test_an_mbpp_test_with_no_entry_given_is_judged_on_the_names_the_response_defines():
    two = normalize({**MBPP, "code": None, "test_list": ["assert f(g(1)) == 4"]})
    gold = two.tests.to_gold()
    both = "```python\ndef g(x):\n    return x + 1\ndef f(x):\n    return x * 2\n```"
    assert verify_code(both + "\n```python\nprint(f(g(1)))\n```", gold).correct
    verdict = verify_code("```python\ndef f(x):\n    return 4\n```", gold)
    assert verdict.category == "wrong" and verdict.detail.startswith("runtime_error"), verdict


@needs_sandbox
def test_the_solutions_names_never_replace_a_builtin_or_a_name_the_checks_define():
    row = {**MBPP, "test_list": ["assert abs(add(2, 3) - 5) < 1e-9"],
           "test_setup_code": "def helper():\n    return 1"}  # fmt: skip
    gold = normalize(row).tests.to_gold()
    cheat = "def abs(x):\n    return 0\ndef helper():\n    return 2\ndef add(a, b):\n    return 0"
    assert not verify_code(f"```python\n{cheat}\n```", gold).correct
    assert verify_code(f"```python\n{MBPP['code']}\n```", gold).correct


def test_a_gzipped_jsonl_file_reads_like_the_plain_one(tmp_path):
    import gzip

    plain = write(tmp_path / "rows.jsonl", [MBPP, HUMANEVAL])
    packed = tmp_path / "rows.jsonl.gz"
    packed.write_bytes(gzip.compress(Path(plain).read_bytes()))
    assert load_code_problems(str(packed), key="k") == load_code_problems(plain, key="k")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match=r"unreadable code data file .*bad\.jsonl\.gz"):
        load_code_problems(str(tmp_path / "bad.jsonl.gz"), key="k")


@needs_sandbox
def test_the_code_task_lists_left_out_problems_in_its_folder_and_passes_the_stdout_cap(
    tmp_path, capsys
):
    task = _task(tmp_path, left_out_dir=str(tmp_path / "left"), stdout_bytes=4096)
    listed = json.loads((tmp_path / "left" / "left_out_train.jsonl").read_text())
    assert listed["row"] == 3 and listed["reason"] == "wrong" and listed["name"] == "row 3"
    assert str(tmp_path / "left" / "left_out_train.jsonl") in capsys.readouterr().err
    assert all(json.loads(p.gold)["stdout_bytes"] == 4096 for p in task.train_problems())
