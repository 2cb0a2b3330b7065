"""The pieces of train_researcher's steps: outcome-GRPO samples from source recall, clipping, verification."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from librarian.cluster.researcher_jobs import ResearchRecord
from librarian.config import load_config
from librarian.learner import LearnerConfig
from librarian.learner.batch import PolicySample
from librarian.pipelines.researcher.config import TrainResearcherConfig
from librarian.pipelines.researcher.steps import (
    ResearcherTask,
    StoreRef,
    clip,
    eval_jobs,
    hint_input,
    teacher_jobs,
    verify,
)
from librarian.rl.samples import policy_samples
from librarian.rl.task import Scored
from librarian.roles.researcher_tools import Finalized
from librarian.roles.trajectory import Trajectory, TurnRecord


class Q:
    def __init__(self, qid, support, answers=("Oslo",)):
        self.id, self.question, self.support, self.answers = qid, f"where is {qid}?", support, list(answers)
        self.keys = [f"person:{qid}"]


def _traj(turns=2, calls=None):
    recs = []
    prompt: tuple[int, ...] = (1, 2, 3)
    for i in range(turns):
        recs.append(TurnRecord(index=i, text="t", calls=calls if (calls and i == 0) else [], prompt_ids=prompt,
                               response_ids=(10 + i, 11 + i), logprobs=(-0.5, -0.5)))
        prompt = prompt + (10 + i, 11 + i, 7)
    return Trajectory("jam_researcher", "q", 4, turns=recs)


def _rec(job, i, sources, traj=None, context="ctx", cited=()):
    return ResearchRecord(job, "t", job.split("-")[0], i, traj or _traj(), Finalized(context, tuple(sources), True,
                                                                                      tuple(cited)), 0, 1)


OUTCOME = LearnerConfig(advantage="outcome_grpo")


def _task(qs, *overrides, store=StoreRef("t", b"data", "h")):
    cfg = load_config(TrainResearcherConfig, ["learner.batch_size=2", "learner.group_size=4", *overrides])
    return ResearcherTask(cfg, list(qs.values()) if isinstance(qs, dict) else qs, store)


def score(batch, qs):
    """The task's scored records (what the step loop builds from `turn_rewards`)."""
    records = [r for recs in batch.values() for r in recs]
    return Scored(records, *_task(qs).turn_rewards(records))


def batch_metrics(scored, qs=None):
    return _task(qs or {"a": Q("a", ["s1"])}).metrics(scored)


def test_rewards_are_source_recall_and_advantages_normalise_within_groups():
    qs = {"a": Q("a", ["s1", "s2"]), "b": Q("b", ["s3"])}
    batch = {"a-j": [_rec("a-j", 0, ["s1"]), _rec("a-j", 1, ["s1", "s2", "x"])],
             "b-j": [_rec("b-j", 0, []), _rec("b-j", 1, ["s3"])]}
    scored = score(batch, qs)
    assert scored.details == [0.5, 1.0, 0.0, 1.0]
    assert scored.turn_rewards == [[0.0, 0.5], [0.0, 1.0], [0.0, 0.0], [0.0, 1.0]]  # on the last turn with tokens
    samples, figures = policy_samples(scored, OUTCOME)
    assert figures["nonzero_advantage_fraction"] == 1.0 and figures["advantage_abs_mean"] > 0
    adv = [max(s.advantages) if max(s.advantages) > 0 else min(s.advantages) for s in samples]
    assert len(samples) == 4 and adv[0] < 0 < adv[1] and adv[2] < 0 < adv[3]
    assert adv[0] == pytest.approx(-adv[1]) and adv[2] == pytest.approx(-adv[3])
    m = batch_metrics(scored)
    assert m["reward"] == pytest.approx(0.625) and m["reward_full_recall"] == 0.5 and m["groups_without_signal"] == 0.0


def test_a_group_with_equal_rewards_gives_no_signal():
    scored = score({"a-j": [_rec("a-j", 0, ["s1"]), _rec("a-j", 1, ["s1"])]}, {"a": Q("a", ["s1"])})
    samples, figures = policy_samples(scored, OUTCOME)
    assert all(a == 0 for s in samples for a in s.advantages)
    assert figures["nonzero_advantage_fraction"] == 0.0
    assert batch_metrics(scored)["groups_without_signal"] == 1.0


def test_nonzero_advantage_fraction_counts_groups_and_valid_call_rate_counts_policy_turns():
    qs = {"a": Q("a", ["s1"]), "b": Q("b", ["s3"])}
    batch = {"a-j": [_rec("a-j", 0, ["s1"]), _rec("a-j", 1, [])],  # signal
             "b-j": [_rec("b-j", 0, ["s3"]), _rec("b-j", 1, ["s3"])]}  # equal rewards: no signal
    assert policy_samples(score(batch, qs), OUTCOME)[1]["nonzero_advantage_fraction"] == 0.5
    assert policy_samples(Scored([], [], []), OUTCOME) == ([], {"nonzero_advantage_fraction": 0.0})
    call = [{"name": "search", "arguments": {"query": "a"}}]
    # _traj(2, calls): the first turn has a call, the second none -> half the policy turns are valid calls
    m = batch_metrics(score({"a-j": [_rec("a-j", 0, ["s1"], _traj(2, call))]}, qs))
    assert m["valid_call_rate"] == 0.5


@given(st.integers(min_value=2, max_value=40), st.integers(min_value=2, max_value=30), st.data())
def test_clip_keeps_the_head_and_the_tail_and_never_trains_a_tails_first_token(n, limit, data):
    mask = (0,) + tuple(data.draw(st.lists(st.integers(0, 1), min_size=n - 1, max_size=n - 1)))
    s = PolicySample(tuple(range(n)), mask, (0.0,) * n, tuple(float(m) for m in mask))
    out, cut = clip([s], limit)
    assert cut == int(n > limit)
    if n <= limit:
        assert out == [s]
    else:
        head = [o for o in out if o.token_ids[0] == 0]
        tail = [o for o in out if o.token_ids[0] != 0]
        assert len(head) == int(any(mask[:limit])) and len(tail) == int(any(mask[n - limit + 1:]))
        for o in head:
            assert o.token_ids == s.token_ids[:limit] and o.loss_mask == s.loss_mask[:limit]
        for o in tail:
            assert o.token_ids == s.token_ids[-limit:]
            assert o.loss_mask[0] == 0 and o.loss_mask[1:] == s.loss_mask[n - limit + 1:]
        assert all(len(o.token_ids) == limit and any(o.loss_mask) for o in out)
    assert clip([s], 0) == ([s], 0)


def test_verify_keeps_answered_and_well_explored_trajectories():
    calls = [{"name": "search", "arguments": {"query": "a"}}, {"name": "browse", "arguments": {"path": "sessions/s1"}}]
    qs = {"a": Q("a", ["s1"])}
    good = _rec("a-1", 0, ["s1"], _traj(calls=calls), context="s1: Ann lives in Oslo", cited=["sessions/s1"])
    no_answer = _rec("a-2", 0, ["s1"], _traj(calls=calls), context="s1: Ann", cited=["sessions/s1"])
    shortcut = _rec("a-3", 0, ["s1"], _traj(calls=calls[:1]), context="Oslo", cited=["sessions/s1"])
    v = verify([good, no_answer, shortcut], qs, lambda r: r.strip("/"))
    assert v.trajectories == [good.trajectory] and v.answer_missing == 1 and v.judge_rejected == 1
    assert v.summary()["teacher_recall"] == 1.0


def test_jobs_rotate_questions_and_only_training_jobs_carry_hints():
    qs = [Q("a", ["s1"]), Q("b", ["s2"]), Q("c", ["s3"])]
    store = StoreRef("t", b"data", "h")
    jobs = _task(qs, "rollout.hint_every=2", store=store).jobs(1, 5)
    assert [j.question_id for j in jobs] == ["c", "a"] and all(j.group_size == 4 and j.min_version == 5 for j in jobs)
    assert jobs[0].hint == hint_input(qs[2]) and jobs[0].hint.evidence == ("sessions/s3",)
    assert [j.seed for j in jobs] == [1009, 1010]  # a function of (seed, step, slot) only: resume-exact
    assert all(j.hint is None for j in _task(qs, "rollout.hint_every=0", store=store).jobs(0, 5))
    assert all(j.hint is None and j.greedy for j in eval_jobs(qs, store, 3, 2, 0))
    teach = teacher_jobs(qs, store, "jam_researcher", 8, 0)
    assert all(j.teacher == "jam_researcher" and j.hint is None and j.data == b"data" for j in teach)
    assert len({j.job_id for j in jobs + teach}) == len(jobs + teach)


def test_grpo_questions_revisit_the_first_n_so_first_and_last_steps_match():
    qs = [Q(name, [f"s{i}"]) for i, name in enumerate("abcde")]
    task = _task(qs, "learner.batch_size=1", "data.grpo_questions=3")
    by_step = [[j.question_id for j in task.jobs(step, 0)] for step in range(12)]
    assert by_step[:3] == by_step[9:] == [["a"], ["b"], ["c"]]
    assert {q for step in by_step for q in step} == {"a", "b", "c"} and set(task.by_id) == {"a", "b", "c"}
    assert {j.question_id for s in range(5) for j in _task(qs, "learner.batch_size=1").jobs(s, 0)} == set("abcde")


def test_metrics_of_an_empty_batch_are_empty():
    assert batch_metrics(Scored([], [], [])) == {}
