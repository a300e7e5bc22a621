"""List functions: a synthetic code task small enough for the tiny models to learn on a CPU.

Each problem asks for a one-line Python function `f(xs)` over a list of digits, described in a
short line of words, and is judged by running the answer's program in the sandbox against four
function-call tests (the `code` verifier, `graft.verify.code.verifier`). A problem is a filter,
a map and a reducer:

    prompt:    f(xs): sum of v*3+1 for odd v
    response:  ```python
               def f(xs):
                   return sum(v*3+1 for v in xs if v%2==1)
               ```

- filter: every v, `even v`, `odd v`, `v>K` (K in 0..8);
- map: `v`, `v*v`, `v*K` (2..9), `v+K` (1..9), `v*K+J` (2..9, 1..9);
- reducer, the skill: `list` (`[... for v in xs if ...]`), `sum` (`sum(... for ...)`) or
  `max` (`max(... for ...)`: the filter keeps at least one value of every test list, so it is
  always defined). The default task has `list` and `sum`; `max` is the third reducer of the
  three-model study (docs/evidence.md).

`list` and `sum` have 12 x 91 = 1092 problems each, `max` 11 x 91 = 1001 (no `v>8`). The
held-out test split is drawn first, then the training split, then a validation split; the three
never share a prompt. Tests are lists of 0..9 drawn from the problem's own seed, chosen so that
the filter keeps some but not all of each list and the four answers are not all equal, and
computed here, in plain Python, from the problem's parts (never by running a program).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass

from graft.config import ConfigError, ListFunctionsConfig
from graft.tasks.code_data import code_verifier
from graft.tasks.splits import SplitTask
from graft.types import Problem
from graft.verify.code.verifier import CodeTests

SKILLS = ("list", "sum", "max")
"""Every reducer the task knows (`ListFunctionsConfig.skills` picks some)."""
_WRAP = {"sum": "sum({})", "max": "max({})", "list": "[{}]"}
TESTS_PER_PROBLEM = 4
FUNCTION = "f"


@dataclass(frozen=True)
class Skill:
    spec: str


@dataclass(frozen=True)
class Spec:
    """One problem: a filter (`all`, `even`, `odd`, `gt`), a map (`id`, `sq`, `mul`, `add`,
    `muladd`) with its constants, and a reducer (`list`, `sum`, `max`)."""

    reducer: str
    filter: str
    k: int = 0
    map: str = "id"
    a: int = 0
    b: int = 0

    def keeps(self, v: int) -> bool:
        return {"all": True, "even": v % 2 == 0, "odd": v % 2 == 1, "gt": v > self.k}[self.filter]

    def value(self, v: int) -> int:
        if self.map == "sq":
            return v * v
        if self.map == "mul":
            return v * self.a
        if self.map == "add":
            return v + self.a
        if self.map == "muladd":
            return v * self.a + self.b
        return v

    def apply(self, xs: list[int]) -> int | list[int]:
        out = [self.value(v) for v in xs if self.keeps(v)]
        if self.reducer == "list":
            return out
        return sum(out) if self.reducer == "sum" else max(out)

    def expr(self) -> str:
        return {"id": "v", "sq": "v*v", "mul": f"v*{self.a}", "add": f"v+{self.a}",
                "muladd": f"v*{self.a}+{self.b}"}[self.map]  # fmt: skip

    def prompt(self) -> str:
        over = {"all": "every v", "even": "even v", "odd": "odd v", "gt": f"v>{self.k}"}
        return f"f(xs): {self.reducer} of {self.expr()} for {over[self.filter]}"

    def condition(self) -> str:
        return {"all": "", "even": " if v%2==0", "odd": " if v%2==1",
                "gt": f" if v>{self.k}"}[self.filter]  # fmt: skip

    def program(self) -> str:
        body = f"{self.expr()} for v in xs{self.condition()}"
        return f"def {FUNCTION}(xs):\n    return {_WRAP[self.reducer].format(body)}\n"


def respond(program: str) -> str:
    """A response that proposes `program`: its one fenced Python block."""
    return f"```python\n{program}```"


def all_specs(reducer: str) -> list[Spec]:
    """Every problem of one reducer. `max` has no `v>8`: it keeps only 9, so its answer would be
    the same on every list and a constant would pass."""
    top = 8 if reducer == "max" else 9
    filters = [("all", 0), ("even", 0), ("odd", 0), *(("gt", k) for k in range(top))]
    pairs = itertools.product(range(2, 10), range(1, 10))
    maps = [("id", 0, 0), ("sq", 0, 0)]
    maps += [("mul", a, 0) for a in range(2, 10)] + [("add", a, 0) for a in range(1, 10)]
    maps += [("muladd", a, b) for a, b in pairs]
    return [Spec(reducer, f, k, m, a, b) for (f, k), (m, a, b) in itertools.product(filters, maps)]


def _test_lists(spec: Spec, seed: int) -> list[list[int]]:
    """Four distinct lists of 3..7 digits, drawn from the problem's own seed, on which the filter
    keeps at least one value and drops one (every v: any list) and the answers are not all the
    same (so that no constant passes)."""
    rng = random.Random(hashlib.sha256(f"{seed}/{spec}".encode()).digest())
    while True:
        out: list[list[int]] = []
        while len(out) < TESTS_PER_PROBLEM:
            xs = [rng.randrange(10) for _ in range(rng.randint(3, 7))]
            kept = sum(spec.keeps(v) for v in xs)
            if kept >= 1 and (spec.filter == "all" or kept < len(xs)) and xs not in out:
                out.append(xs)
        if len({repr(spec.apply(xs)) for xs in out}) > 1:
            return out


def problem_tests(spec: Spec, seed: int) -> CodeTests:
    lists = _test_lists(spec, seed)
    return CodeTests(
        "call", FUNCTION, tuple((xs,) for xs in lists), tuple(spec.apply(xs) for xs in lists)
    )


def _mutations(spec: Spec) -> list[Spec]:
    """Plausible wrong versions of a spec: a constant off by one, the other parity, another
    reducer (`list` and `sum` each other's, `max` `sum`), the map or filter dropped."""
    other = {"list": "sum", "sum": "list", "max": "sum"}[spec.reducer]
    out = [Spec(other, spec.filter, spec.k, spec.map, spec.a, spec.b)]
    if spec.filter in ("even", "odd"):
        out.append(Spec(spec.reducer, "odd" if spec.filter == "even" else "even", 0, spec.map,
                        spec.a, spec.b))  # fmt: skip
    if spec.filter == "gt":
        out += [Spec(spec.reducer, "gt", k, spec.map, spec.a, spec.b)
                for k in (spec.k - 1, spec.k + 1) if 0 <= k <= 8]  # fmt: skip
    if spec.filter != "all":
        out.append(Spec(spec.reducer, "all", 0, spec.map, spec.a, spec.b))
    if spec.map in ("mul", "add", "muladd"):
        low = 2 if spec.map in ("mul", "muladd") else 1
        out += [Spec(spec.reducer, spec.filter, spec.k, spec.map, a, spec.b)
                for a in (spec.a - 1, spec.a + 1) if low <= a <= 9]  # fmt: skip
    if spec.map == "muladd":
        out += [Spec(spec.reducer, spec.filter, spec.k, spec.map, spec.a, b)
                for b in (spec.b - 1, spec.b + 1) if 1 <= b <= 9]  # fmt: skip
    if spec.map != "id":
        out.append(Spec(spec.reducer, spec.filter, spec.k, "id"))
    return out


class ListFunctionsTask(SplitTask):
    """The list-functions code task (module docstring)."""

    name = "list_functions"

    def __init__(self, cfg: ListFunctionsConfig, *, runs_code: bool = True) -> None:
        """`runs_code=False`: only the problems and reference solutions (pre-training needs
        no sandbox); the verifier is then `code`, unchecked."""
        for skill in cfg.skills:
            if skill not in SKILLS:
                raise ConfigError(
                    f"task.list_functions.skills: unknown skill {skill!r}; known: {list(SKILLS)}"
                )
        self.cfg = cfg
        self.skills = tuple(Skill(s) for s in cfg.skills)
        self.verifier = (
            code_verifier(cfg.sandbox, "task.list_functions.sandbox") if runs_code else "code"
        )
        self._specs: dict[str, Spec] = {}
        self._train, self._test, self._val = self._build()

    def _build(self) -> tuple[tuple[Problem, ...], ...]:
        rng = random.Random(self.cfg.seed)
        n = len(self.skills)
        share = lambda total, i: total // n + (i < total % n)  # noqa: E731
        splits: tuple[list[Problem], list[Problem], list[Problem]] = ([], [], [])
        for i, skill in enumerate(self.skills):
            specs = all_specs(skill.spec)
            rng.shuffle(specs)
            wants = [share(getattr(self.cfg, f"num_{s}"), i) for s in ("test", "train", "val")]
            start = 0
            for split, want in zip((1, 0, 2), wants, strict=True):  # test, train, val
                splits[split].extend(self._problem(s) for s in specs[start : start + want])
                start += want
        for split in splits:
            rng.shuffle(split)
        train, test, val = (tuple(s) for s in splits)
        return train, test, val

    def _problem(self, spec: Spec) -> Problem:
        problem = Problem(spec.prompt(), problem_tests(spec, self.cfg.seed).to_gold(), spec.reducer)
        self._specs[problem.id] = spec
        return problem

    def solution(self, problem: Problem) -> str:
        """Reference response for one of this task's problems (for supervised pre-training)."""
        return respond(self._specs[problem.id].program())

    def wrong_solution(self, problem: Problem, rng: random.Random) -> str:
        """A plausible wrong response (pre-training noise): the program of a mutated spec."""
        return respond(rng.choice(_mutations(self._specs[problem.id])).program())
