"""The tasks workload's pure parts (issue 31 item 2): the built-in set and its solver, judging, the task file's
one-line mistakes, the statistics (Wilson against the store's own macro, McNemar, two proportions, the auto-stop
rule), and the sim's answer stream. The runs against the sim: tests/core/test_tasks_pass.py."""

from __future__ import annotations

import math
import random

import pytest
from click.testing import CliRunner

from infermatrix.cli.run_cmd import run

from infermatrix.core.store import open_store
from infermatrix.core.tasks.builtin import KINDS, make_tasks, solve
from infermatrix.core.tasks.judge import judge, normalize
from infermatrix.core.tasks.stats import StopRule, mcnemar_exact, mean_interval, two_proportions, wilson
from infermatrix.core.tasks.taskfile import TaskFileError, read_task_file
from infermatrix.plugins.sim.profile import SimProfile
from infermatrix.plugins.sim.tasks import AnswerStream, plan_answer, prompt_task_answer
from infermatrix.plugins.sim.textgen import TextStream


def test_builtin_tasks_are_seeded_and_the_solver_reads_each_answer_from_its_prompt() -> None:
    tasks = make_tasks(7, 40)
    assert [t.prompt for t in tasks] == [t.prompt for t in make_tasks(7, 40)]  # the same seed, the same tasks
    assert [t.prompt for t in tasks] != [t.prompt for t in make_tasks(8, 40)]
    assert {t.kind for t in tasks} == set(KINDS) and len({t.id for t in tasks}) == 40
    for t in tasks:
        assert solve(t.prompt) == t.answer, t
    assert solve("Start with 3. Multiply by 4. Subtract 5. What number do you end with?") == "7"
    assert solve("How many times does the letter 's' appear in 'mississippi'?") == "4"
    assert solve("a prompt that asks nothing of the kind") is None
    assert make_tasks(1, 6, ("reverse",))[0].answer == make_tasks(1, 6, ("reverse",))[0].prompt.split("'")[1][::-1]


def test_judging_reads_the_last_answer_and_normalises_it() -> None:
    assert judge("Answer: 41 ... no, wait. Answer: 42.", "42").correct
    assert judge("first Answer: 41 then Answer: 42", "41") == judge("first Answer: 41 then Answer: 42", "41").__class__("42", False)
    assert judge("the total is 1,000", "1000").correct  # no mark: a numeric answer is the last number
    assert not judge("the word is tenalp", "tenalp").correct  # no mark, not numeric: nothing extracted
    assert judge("**Answer:** `Apple, Fig`", "apple, fig").correct
    assert judge("#### 72", "72.0").correct
    assert normalize(" 42.0 ") == "42" and normalize("'Tenalp'.") == "tenalp"
    hit = judge("so the choice is (C) here", regex=r"\(([A-D])\)")
    assert hit.correct and hit.extracted == "C"
    assert judge("nothing", regex=r"\(([A-D])\)").correct is False


def _write(tmp_path, text: str):
    p = tmp_path / "tasks.jsonl"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,where,says", [
    ('{"prompt": "2+2?", "answer": "4"}\n{"prompt": "no answer"}\n', ":2:", 'no "answer" or "regex"'),
    ('{"prompt": "x", "regex": "(unclosed"}\n', ":1:", "does not compile"),
    ("", ":1:", "no tasks"),
    ("\n\n", ":1:", "no tasks"),
    ('{"prompt": "x", "answer": "1", "regex": "1"}\n', ":1:", "both"),
    ('{"prompt": "x", "answer": 1}\nnot json\n', ":2:", "not JSON"),
    ('{"answer": "1"}\n', ":1:", 'no "prompt"'),
    ('{"id": "a", "prompt": "x", "answer": 1}\n{"id": "a", "prompt": "y", "answer": 2}\n', ":2:", "twice"),
])  # fmt: skip
def test_task_file_mistakes_are_one_line_naming_file_and_line(tmp_path, text, where, says) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(TaskFileError) as err:
        read_task_file(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}{where}") and says in msg and "\n" not in msg


def test_a_task_file_reads_answers_and_regexes(tmp_path) -> None:
    p = _write(tmp_path, '{"prompt": "2+2?", "answer": 4}\n\n{"id": "q7", "prompt": "Pick", "regex": "\\\\(([A-D])\\\\)"}\n')
    a, b = read_task_file(p)
    assert (a.id, a.answer, a.regex, a.task_set) == ("line1", "4", None, "tasks.jsonl")
    assert (b.id, b.answer, b.regex) == ("q7", None, r"\(([A-D])\)")


def test_the_cli_refuses_a_bad_task_file_in_one_line_with_exit_2(tmp_path) -> None:
    bad = _write(tmp_path, '{"prompt": "2+2?", "answer": "4"}\n{"prompt": "no answer"}\n')
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[engine]\nkind = "sim"\nbase_url = "http://127.0.0.1:1"\n[matrix]\ncontexts = []\nworkload = "tasks"\n'
                   f'[workload]\nfile = "{bad}"\n')  # fmt: skip
    result = CliRunner().invoke(run, [str(cfg), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{bad}:2:" in lines[0] and "Traceback" not in result.output, result.output


def test_wilson_is_the_store_macro_and_the_tests_give_known_values(tmp_path) -> None:
    store = open_store(str(tmp_path / "w.duckdb"))
    try:
        for good, n in [(0, 1), (3, 10), (7, 7), (25, 40), (500, 1000)]:
            _, ((lo, hi),) = store.query("SELECT wilson_bound(?, ?, -1), wilson_bound(?, ?, 1)", [good, n, good, n])
            assert wilson(good, n) == pytest.approx((lo, hi), abs=1e-12)
    finally:
        store.close()
    assert wilson(0, 0) is None
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 5) == 2 / 32
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    # 45/50 against 30/50: pooled 0.75, z = 0.3 / sqrt(0.75 * 0.25 * 0.04) = 3.464
    assert two_proportions(45, 50, 30, 50) == pytest.approx(math.erfc(3.4641016 / math.sqrt(2)), rel=1e-6)
    assert two_proportions(5, 10, 0, 0) is None and two_proportions(10, 10, 5, 5) == 1.0
    mean, lo, hi = mean_interval([10.0, 12.0, 14.0])  # sd 2, t(2) = 4.303
    assert mean == 12 and hi - mean == pytest.approx(4.303 * 2 / math.sqrt(3))


def test_the_stop_rule_waits_for_min_tasks_and_reads_the_asked_interval() -> None:
    rng = random.Random(1)
    tokens = [rng.randint(30, 50) for _ in range(200)]
    rule = StopRule(0.1, "output_tokens", min_tasks=20)
    assert not rule.met([40] * 19, [True] * 19)  # a zero-width interval, but too few tasks
    assert rule.met([40] * 20, [True] * 20)
    first = next(n for n in range(2, 201) if rule.met(tokens[:n], [True] * n))
    m = mean_interval([float(t) for t in tokens[:first]])
    assert first >= 20 and (m[2] - m[1]) / m[0] < 0.1
    acc = StopRule(0.2, "accuracy", min_tasks=5)
    assert acc.width([], [True, False] * 50) == pytest.approx(wilson(50, 100)[1] - wilson(50, 100)[0])
    assert acc.met([], [True, False] * 50) and not acc.met([], [True, False] * 10)


def test_the_sim_ends_a_task_with_its_answer_in_exactly_its_tokens() -> None:
    p = SimProfile(task_accuracy=1.0)
    stream, truth = plan_answer(p, "-112", 30, random.Random(3), TextStream(random.Random(3)))
    text = stream.take(7) + stream.take(20) + stream.take(3)
    assert text.endswith(" Answer: -112") and truth == {"task_answer": "-112", "answered": "-112", "task_correct": True}
    assert judge(text, "-112").correct
    wrong, truth = plan_answer(SimProfile(task_accuracy=0.0), "tenalp", 12, random.Random(3), TextStream(random.Random(3)))
    said = wrong.take(12)
    assert truth["task_correct"] is False and said.endswith(f" Answer: {truth['answered']}") and not judge(said, "tenalp").correct
    _, cut = plan_answer(p, "-112", 3, random.Random(3), TextStream(random.Random(3)))  # the end comes before the answer fits
    assert cut["task_correct"] is False and cut["answered"] is None
    assert isinstance(stream, AnswerStream)
    task = make_tasks(1, 1)[0]
    assert prompt_task_answer({"prompt": task.prompt}, "completions", False) == task.answer
    assert prompt_task_answer({"prompt": task.prompt}, "completions", True) is None  # the matrix's ignore_eos: no answer
    assert prompt_task_answer({"messages": [{"role": "user", "content": task.prompt}]}, "chat", False) == task.answer


def test_the_sim_profile_checks_natural_tokens() -> None:
    assert SimProfile().natural_tokens is None and SimProfile().task_accuracy == 1.0  # off by default: nothing else changes
    with pytest.raises(ValueError, match="natural_tokens"):
        SimProfile(natural_tokens=(50, 20))
    assert SimProfile(natural_tokens=[20, 50]).natural_tokens == (20, 50)
