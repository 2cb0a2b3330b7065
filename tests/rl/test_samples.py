"""The RL step's pure parts: the stale filter, job seeds and rotation, and the config checks at load time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from librarian.config import ConfigError, load_config
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.researcher.config import TrainResearcherConfig
from librarian.rl import loop
from librarian.rl.samples import StaleError, keep_fresh
from librarian.rl.task import Scored, job_seed, rotation


def _scored(versions):
    records = [SimpleNamespace(job_id=f"j{i}", policy_version=v) for i, v in enumerate(versions)]
    return Scored(records, [[float(i)] for i in range(len(versions))], list(range(len(versions))))


def test_keep_fresh_drops_or_keeps_and_reports_the_staleness_it_saw():
    kept, fig = keep_fresh(_scored([5, 3, 4]), current=5, max_staleness=1)
    assert kept.details == [0, 2] and kept.turn_rewards == [[0.0], [2.0]]  # records, rewards, details stay aligned
    assert fig == {"stale_dropped": 1.0, "staleness_max": 2.0, "staleness_mean": 1.0}
    kept, fig = keep_fresh(_scored([5, 3, 4]), current=5, max_staleness=1, policy="keep")
    assert kept.details == [0, 1, 2] and fig["stale_dropped"] == 0.0
    with pytest.raises(StaleError, match="newer than the learner"):
        keep_fresh(_scored([6, 5]), current=5, max_staleness=1)
    assert keep_fresh(_scored([]), 0, 0)[1] == {"stale_dropped": 0.0, "staleness_max": 0.0, "staleness_mean": 0.0}


def test_jobs_seeds_depend_on_seed_step_and_slot_only_and_prompts_rotate():
    assert job_seed(0, 1, 1) == 1010 and job_seed(1, 0, 0) == 100_003
    assert len({job_seed(s, t, b) for s in range(3) for t in range(50) for b in range(8)}) == 3 * 50 * 8
    assert rotation("abc", 1, 2) == [(0, "c"), (1, "a")] and rotation("abc", 0, 4)[-1] == (3, "a")
    with pytest.raises(ValueError, match="at least one prompt"):
        rotation([], 0, 1)


@pytest.mark.parametrize("schema", [TrainBuilderConfig, TrainResearcherConfig])
@pytest.mark.parametrize(("args", "match"), [
    (["learner.advantage=ppo"], "learner.advantage must be one of"),
    (["rollout.temperature=0.7"], "must equal rollout.temperature"),
    (["off_policy.stale=sometimes"], "off_policy needs stale in drop/keep"),
    (["rollout.asynchronous=true", "off_policy.max_staleness=0"], "off_policy.max_staleness must be >= 1"),
    (["rollout.workers=0"], "rollout.workers must be >= 1"),
    (["ray.strategy=ROUND_ROBIN"], "ray.strategy"),
    (["sft.lr=-1"], "sft.lr"),
    (["sft.eps=-1"], "sft.eps"),
    (["learner.loss.rollout_is=always"], "learner.loss.rollout_is"),
])
def test_both_recipes_reject_a_bad_setting_when_the_config_loads(schema, args, match):
    """Validation runs when `load_config` builds the dataclasses: before any Ray or model starts."""
    with pytest.raises(ValueError, match=match):
        load_config(schema, args)


def test_recipe_sections_are_the_worker_specs_with_their_own_defaults():
    b, r = load_config(TrainBuilderConfig, []), load_config(TrainResearcherConfig, [])
    assert (b.rollout.hint_every, b.rollout.budget, b.probe.budget, b.learner.advantage) == (0, 32, 8, "multi_turn_grpo")
    assert (r.rollout.hint_every, r.rollout.budget, r.learner.advantage, r.steps) == (2, 4, "outcome_grpo", 4)
    ok = load_config(TrainBuilderConfig, ["rollout.asynchronous=true", "learner.loss.rollout_is=token"])
    assert ok.rollout.asynchronous and ok.learner.loss.rollout_is == "token"
    with pytest.raises(ConfigError, match="did you mean 'rollout.asynchronous'"):
        load_config(TrainBuilderConfig, ["rollout.async=true"])


@pytest.mark.parametrize(("lr", "updates"), [(1e-4, 1), (0.0, 0)])
def test_a_step_at_lr_zero_neither_updates_nor_publishes(monkeypatch, lr, updates):
    """An update at lr 0 would move no weight, so the loop skips it (and the publish): the control costs only
    its sampling. The advantages' figures are still reported."""
    calls = []
    session = SimpleNamespace(version=3, step=lambda samples: calls.append("step") or {"loss": 0.5},
                              publish=lambda: calls.append("publish"))
    task = SimpleNamespace(turn_rewards=lambda recs: ([[1.0]] * len(recs), [None] * len(recs)),
                           metrics=lambda scored: {"reward": 1.0})
    monkeypatch.setattr(loop, "policy_samples", lambda kept, c: (["sample"], {"nonzero_advantage_fraction": 1.0}))
    cfg = SimpleNamespace(learner=SimpleNamespace(lr=lr), off_policy=SimpleNamespace(max_staleness=1, stale="drop"))
    metrics, _ = loop.learn(session, task, cfg, [SimpleNamespace(job_id="j", policy_version=3)])
    assert calls == ["step", "publish"] * updates
    assert ("loss" in metrics) == bool(updates) and metrics["nonzero_advantage_fraction"] == 1.0
