"""The warm start's gate: GRPO starts only when the SFT policy's sampled builds of held-out hard corpora succeed
often enough (`sft.min_success`), so that groups of builds differ in reward and the updates have signal.

The gate corpora (`data.val_corpora` of `data.val_seeds`) are hard ones (the flat store misses them, the
teacher solves them) from universes no training, SFT or exam corpus came from. Each is built
`sft.gate_samples` times by the published policy at the training temperature; a build succeeds when the
probe reader then answers every hidden question. The rate (with a CI resampling whole corpora) is logged,
returned for results.json, and compared with the threshold.
"""

from __future__ import annotations

import logging
from typing import Any

from librarian.cluster.builder_jobs import BuildJob
from librarian.config import ConfigError
from librarian.evaluation.exam_rates import rate_ci, solved
from librarian.rl.protocols import RolloutSession
from librarian.rl.task import job_seed

log = logging.getLogger("librarian.train_builder")
GATE_SEED_STEP = 80_000  # the gate's sampling seed: job_seed(seed, GATE_SEED_STEP, 0), no GRPO step's


class WarmStartTooWeak(ConfigError):
    """The warm start's sampled success on the gate corpora is below `sft.min_success`."""


def warm_start_gate(cfg: Any, s: RolloutSession, corpora: list, probes: Any) -> dict[str, Any]:
    """The published policy's sampled success on the gate `corpora` (`s` is the run's `RLSession`): {"success",
    "ci", "corpora", "builds", "min_success"}; raises WarmStartTooWeak below `cfg.sft.min_success`."""
    threshold, k = float(cfg.sft.min_success), int(cfg.sft.gate_samples)
    if not corpora or k < 1:
        if threshold > 0:
            raise ConfigError(f"sft.min_success={threshold} needs gate corpora (data.val_corpora with data.val_seeds) "
                              f"and sft.gate_samples >= 1, got {len(corpora)} corpora and {k} samples")
        return {}
    job = BuildJob("gate", "", [], group_size=k, seed=job_seed(cfg.seed, GATE_SEED_STEP, 0), min_version=s.version,
                   corpora=[(c.corpus_id, c.docs) for c in corpora])
    finals = [(r.final, r.corpus_id) for r in s.rollout([job])["gate"]]
    outcomes: dict[str, list[float]] = {}
    for (_, cid), u in zip(finals, probes.utilities(finals), strict=True):
        outcomes.setdefault(cid, []).append(solved(u))
    rate = rate_ci(outcomes, seed=cfg.seed)
    gate = {"success": rate["mean"], "ci": rate["ci"], "corpora": rate["n"], "builds": rate["builds"],
            "min_success": threshold}
    log.info("warm-start gate: sampled success %.3f [%.3f, %.3f] on %d held-out hard corpora (%d builds); "
             "GRPO needs >= %.2f", gate["success"], *gate["ci"], gate["corpora"], gate["builds"], threshold)
    if gate["success"] < threshold:
        raise WarmStartTooWeak(
            f"the warm start's sampled success on {gate['corpora']} held-out hard corpora is {gate['success']:.3f} "
            f"(95% CI [{gate['ci'][0]:.3f}, {gate['ci'][1]:.3f}]), below sft.min_success={threshold}: its groups "
            "would rarely differ in reward; fine-tune on more teacher corpora (sft.corpora) or longer (sft.epochs)")
    return gate
