"""Synthetic arithmetic: determinism, provably disjoint splits, skills, solutions; prompt order."""

import pytest

from graft.config import ArithmeticConfig, ConfigError
from graft.tasks import prompt_batch
from graft.tasks.arithmetic import ArithmeticTask, parse_skill, solution
from graft.verify.math.grader import verify_final_number


@pytest.mark.parametrize(
    "skills",
    [("add:2,2",), ("mul:3,1:2-5", "mul:3,1:6-9"), ("chain:1,1,1,1", "add:2,1"), ("add:6,6",)],
)
def test_splits_are_disjoint_and_deterministic(skills):
    cfg = ArithmeticConfig(skills=skills, num_train=300, num_test=60, num_val=40, seed=5)
    a, b = ArithmeticTask(cfg), ArithmeticTask(cfg)
    assert a.train_problems() == b.train_problems() and a.test_problems() == b.test_problems()
    train = {p.prompt for p in a.train_problems()}
    test = {p.prompt for p in a.test_problems()}
    val = {p.prompt for p in a.val_problems()}
    assert not train & test and not train & val and not test & val
    assert len(test) == 60 and len(val) == 40 and len(train) == 300
    other = ArithmeticTask(ArithmeticConfig(skills=skills, num_train=300, num_test=60, seed=6))
    assert other.test_problems() != a.test_problems()


def test_small_problem_space_is_shared_without_overlap():
    # add:1,1 has 100 problems; asking for more gives what exists, test first
    task = ArithmeticTask(
        ArithmeticConfig(skills=("add:1,1",), num_train=500, num_test=30, num_val=10)
    )
    assert len(task.test_problems()) == 30 and len(task.train_problems()) == 70
    assert task.val_problems() == ()


def test_every_reference_solution_verifies_and_has_its_skill():
    cfg = ArithmeticConfig(
        skills=("add:2,2", "mul:3,1:2-5", "chain:1,1,1", "mul:2,2"),
        scratchpad=True,
        num_train=80,
        num_test=20,
    )
    task = ArithmeticTask(cfg)
    for p in task.train_problems() + task.test_problems():
        assert verify_final_number(task.solution(p), p.gold).correct
        assert p.skill in cfg.skills
    skills = {p.skill for p in task.train_problems()}
    assert skills == set(cfg.skills)  # the mix is uniform over skills


def test_scratchpad_solutions_by_hand():
    assert solution(parse_skill("mul:3,1"), (347, 6), scratchpad=True) == (
        "300*6+40*6+7*6=1800+240+42=2040+42=2082"
    )
    assert solution(parse_skill("mul:3,1"), (307, 6), scratchpad=True) == "300*6+7*6=1800+42=1842"
    assert solution(parse_skill("mul:3,1"), (300, 6), scratchpad=True) == "1800"
    assert solution(parse_skill("add:2,2"), (47, 35), scratchpad=True) == "40+30+7+5=70+12=82"
    assert solution(parse_skill("chain:1,1,1"), (3, 5, 7), scratchpad=True) == "8+7=15"
    assert solution(parse_skill("add:2,2"), (47, 35), scratchpad=False) == "82"


def test_skill_ranges():
    skill = parse_skill("mul:3,1:2-5")
    assert skill.operand_range(0) == (100, 999) and skill.operand_range(1) == (2, 5)
    assert parse_skill("add:1,2").operand_range(0) == (0, 9)
    task = ArithmeticTask(ArithmeticConfig(skills=("mul:3,1:6-9",), num_train=50, num_test=5))
    assert all(6 <= int(p.prompt.split("*")[1][:-1]) <= 9 for p in task.train_problems())


@pytest.mark.parametrize(
    "bad", ["sub:2,2", "add:2", "add:x,2", "add:2,2:9-1", "mul:1,1,1", "add:0,2"]
)
def test_bad_skills_name_the_key(bad):
    with pytest.raises(ConfigError, match=r"task\.arithmetic\.skills"):
        parse_skill(bad)


def test_prompt_batches_cover_an_epoch_and_depend_only_on_seed_and_step():
    problems = ArithmeticTask(
        ArithmeticConfig(num_train=10, num_test=0, num_val=0)
    ).train_problems()
    first = [prompt_batch(problems, step=s, batch_size=4, seed=1) for s in range(5)]
    assert first == [prompt_batch(problems, step=s, batch_size=4, seed=1) for s in range(5)]
    flat = [p for batch in first for p in batch]
    assert sorted(p.id for p in flat[:10]) == sorted(p.id for p in problems)  # epoch 0
    assert sorted(p.id for p in flat[10:20]) == sorted(p.id for p in problems)  # epoch 1
    assert flat[:10] != flat[10:20]  # reshuffled per epoch
    assert prompt_batch(problems, step=0, batch_size=4, seed=2) != first[0]
