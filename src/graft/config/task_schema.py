"""The task sections of the config (`task.*`): which problems a run trains and evaluates on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ArithmeticConfig:
    skills: tuple[str, ...] = ("add:2,2",)
    """Skill specs, mixed uniformly: `add:2,2` (two 2-digit operands), `mul:3,1` (3-digit times
    1-digit), `mul:3,1:2-5` (second operand restricted to 2..5), `chain:1,1,1` (a+b+c)."""
    scratchpad: bool = False
    """Responses show the place-value working (`347*6=300*6+40*6+7*6=...=2082`) first."""
    num_train: int = 4000
    """Training problems (at most; fewer when the skill's problem space is smaller)."""
    num_test: int = 500
    """Held-out test problems, disjoint from the training problems."""
    num_val: int = 200
    """Validation problems (for choosing the best checkpoint), disjoint from train and test."""
    seed: int = 1234
    """Seed of the problem set itself (kept apart from run.seed so runs share one problem set)."""


@dataclass(frozen=True)
class MathDataConfig:
    train: str = ""
    """Training data: a .jsonl or .parquet path, or a Hugging Face dataset name (needs network)."""
    test: str = ""
    """Held-out data, same forms as `train`; empty: none."""
    val: str = ""
    """Validation data for choosing the best checkpoint, same forms; empty: none."""
    train_split: str = "train"
    """Split name when `train` is a Hugging Face dataset."""
    test_split: str = "test"
    """Split name when `test` is a Hugging Face dataset."""
    val_split: str = "validation"
    """Split name when `val` is a Hugging Face dataset."""
    subset: str = ""
    """Hugging Face dataset configuration name, if the dataset has several."""
    revision: str = ""
    """Hugging Face dataset revision (a commit id, tag or branch) for the hub sources; pin it so
    that the data cannot change under a run. Empty: the newest."""
    problem_column: str = "problem"
    """Column holding the problem text."""
    answer_column: str = "answer"
    """Column holding the gold answer (LaTeX or plain)."""
    suffix: str = " Let's think step by step and output the final answer within \\boxed{}."
    """Appended to every problem to form the task prompt (the paper's instruction)."""
    limit: int = 0
    """Use at most this many rows of each file; 0: all."""
    conflicts: Literal["refuse", "drop"] = "refuse"
    """A problem that two rows give different answers: `refuse` names the rows and stops; `drop`
    leaves out every such problem (with a warning)."""


@dataclass(frozen=True)
class CodeDataConfig:
    train: str = ""
    """Training problems: a .jsonl or .parquet file in a layout graft reads (graft, MBPP,
    HumanEval, TACO, LiveCodeBench; `graft.tasks.code_data`), or a Hugging Face dataset name in
    one of those layouts (needs `revision`)."""
    test: str = ""
    """Held-out problems, same forms; empty: none."""
    val: str = ""
    """Validation problems for choosing the best checkpoint; empty: none."""
    revision: str = ""
    """The full commit id (40 hex characters) of the Hugging Face datasets named above: required
    for a dataset name, so that the problems cannot change under a run."""
    subset: str = ""
    """Hugging Face dataset configuration name (MBPP: `full` or `sanitized`), if it has several."""
    train_split: str = "train"
    """Split name when `train` is a Hugging Face dataset."""
    test_split: str = "test"
    """Split name when `test` is a Hugging Face dataset."""
    val_split: str = "validation"
    """Split name when `val` is a Hugging Face dataset."""
    suffix: str = "\nAnswer with the complete program in one ```python code block."
    """Appended to every problem to form the task prompt."""
    check_references: bool = True
    """Run each problem's reference solution against its own tests at load; a problem whose
    reference fails is left out (counted, named by its dataset id in a warning, and listed with
    the reason in a JSONL file the warning names)."""
    left_out_dir: str = ""
    """Folder for the lists of problems `check_references` leaves out (`left_out_train.jsonl`,
    `left_out_test.jsonl`, `left_out_val.jsonl`); empty: a new file in the system's temp folder
    for each, named in the warning."""
    stdout_bytes: int = 1 << 20
    """What one sandboxed run of a candidate may write to standard output, and to each of its
    result channels (bytes, 1 KiB to 1 GiB; default 1 MiB); past it the run ends as
    `output_limit`. Standard error has its own, smaller cap."""
    sandbox: Literal["namespaces", "unsafe_local"] = "namespaces"
    """How candidate programs run: `namespaces` (the sandbox; refused in one line where the
    machine cannot isolate), or `unsafe_local`: a plain subprocess with resource limits and a
    wall clock but NO isolation (files, network and processes of this machine are open to the
    program). Never a default; graft warns at start."""
    limit: int = 0
    """Use at most this many problems of each file; 0: all."""


@dataclass(frozen=True)
class ListFunctionsConfig:
    skills: tuple[str, ...] = ("list", "sum")
    """Reducers, mixed evenly: `list` (`[v*3 for v in xs if v>4]`), `sum` (`sum(...)`) and
    `max` (`max(...)`, the third skill of the three-model study)."""
    num_train: int = 1600
    """Training problems (at most 1092 per skill, less the test and validation problems)."""
    num_test: int = 200
    """Held-out test problems, disjoint from the training problems."""
    num_val: int = 100
    """Validation problems, disjoint from train and test."""
    seed: int = 1234
    """Seed of the problem set and its tests (kept apart from run.seed)."""
    sandbox: Literal["namespaces", "unsafe_local"] = "namespaces"
    """How candidate programs run, as `task.code.sandbox`."""


@dataclass(frozen=True)
class TaskConfig:
    name: Literal["arithmetic", "math", "code", "list_functions"] = "arithmetic"
    """Which task family: built-in synthetic arithmetic, math problems read from data files,
    code problems with tests read from data files, or built-in synthetic list functions (a small
    code task for CPU work); code runs in a sandbox."""
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    """Settings of the synthetic arithmetic task."""
    math: MathDataConfig = field(default_factory=MathDataConfig)
    """Settings of the math-from-data task."""
    code: CodeDataConfig = field(default_factory=CodeDataConfig)
    """Settings of the code task."""
    list_functions: ListFunctionsConfig = field(default_factory=ListFunctionsConfig)
    """Settings of the synthetic list-functions code task."""
