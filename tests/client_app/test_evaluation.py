"""What a client evaluates each round (`settings.sections.EvaluationSettings`): ``eval-subset`` scores
a fixed prefix of its questions before the last round and all of them in the last;
``eval-exact-match = false`` leaves out the generated answers of the last round."""

from __future__ import annotations

from settings.sections import EvaluationSettings
from tests.helpers.runs import read_jsonl
from tests.tasks.test_generative import simulate


def test_the_subset_is_a_fixed_prefix_before_the_last_round_and_everything_in_it():
    questions = list(range(7))
    subset = EvaluationSettings(eval_subset=3)
    assert subset.questions(questions, last=False) == [0, 1, 2]
    assert subset.questions(questions, last=True) == questions
    assert EvaluationSettings().questions(questions, last=False) == questions


def test_a_run_scores_the_subset_until_its_last_round_and_skips_generating_when_asked(tmp_path):
    code, out, err = simulate("--num-clients", "2", "--run-config",
                              "model='tiny-llava' dtype='float32' eval-answers='closed-set' eval-subset=2 "
                              "eval-exact-match=false num-server-rounds=2 local-steps=1 batch-size=2 "
                              "max-train-samples=4 max-test-samples=5 score-batch-size=2 budgets='1' "
                              f"optimizer-pop-size=6 optimizer-generations=2 results-dir='{tmp_path}' "
                              "run-name='run'")
    assert code == 0, out[-2000:] + err[-2000:]
    rows = read_jsonl(tmp_path / "run" / "clients.jsonl")
    counts = {(r["round"], r["client"]): r["evaluate"]["num-examples"] for r in rows if r.get("evaluate")}
    assert counts == {(r, c): 2 if r < 2 else 5 for r in (0, 1, 2) for c in ("partition-0", "partition-1")}
    assert not any("exact-match" in r["evaluate"] for r in rows if r.get("evaluate"))
