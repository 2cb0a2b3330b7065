"""Where does one GRPO update move the policy? A learning-rate probe for `train_builder`, in one process.

    python benchmarks/update_direction.py --out build/bench/update_direction
        [--config configs/learning_builder.yaml] [--group-size 8] [--lrs 1e-5 1e-4 3e-4 7e-4 2e-3] [--eps 1e-8 1e-4]
        [key=value ...]

From the policy after SFT (the config's teacher, corpora, epochs and rate; the checkpoint is kept in OUT/sft and
reused: copy a run's `checkpoints/sft` there to start from it), one group of `--group-size` builds is sampled, by
the learner's own model on transformers (a vLLM preset's model), on the first training corpus (step 0's job) and
another on the second (step 1's, held out). Then, for each AdamW epsilon (`--eps`, default the config's) and each
learning rate, a fresh learner loads the SFT checkpoint and makes ONE update on the first group, and the summed
log-prob of every build of both groups is measured before and after. A useful update raises the successful builds
(positive advantage) and lowers the failed ones; one that is too large lowers both. Each epsilon's sweep starts with
a control at lr 0, which must move no build by more than 1e-3 nats (else the run stops: the measurement, not the
update, moved them). Without Ray, probes run in this process (the config's scripted reader).

OUT/results.json holds, per epsilon and learning rate, `trained_success` and `trained_failure` (mean change of the summed
log-prob of the trained group's builds with positive and with negative advantage), `held_out_success` and
`held_out_failure` (the same on the held-out group, which the update never saw) and the per-build changes
(`controls`: the lr-0 rows); OUT/update_direction.png plots them against the learning rate, one panel an epsilon.
This measures the direction and size of one update, not learning over many.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from librarian.cluster.builder_worker import BuilderRolloutWorker  # noqa: E402
from librarian.config import load_config  # noqa: E402
from librarian.learner import Learner  # noqa: E402
from librarian.learner.sft import fine_tune  # noqa: E402
from librarian.pipelines.builder.config import TrainBuilderConfig  # noqa: E402
from librarian.pipelines.builder.corpus_sets import corpus_sets  # noqa: E402
from librarian.pipelines.builder.steps import BuilderTask, initial_utilities, teacher_samples  # noqa: E402
from librarian.rewards.construction import ProbeService  # noqa: E402
from librarian.rewards.probe_exam import LocalProbes  # noqa: E402
from librarian.rl.samples import policy_samples  # noqa: E402
from librarian.rl.session import learner_model  # noqa: E402
from librarian.rl.task import Scored  # noqa: E402

DEFAULT_CONFIG = "configs/learning_builder.yaml"


class LocalSession:
    """A `RolloutSession` over one in-process worker: `rollout(jobs) -> {job_id: records}`."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    @property
    def version(self) -> int:
        return self.worker.version

    def rollout(self, jobs: list[Any], weights: list | None = None) -> dict[str, list]:
        return {job.job_id: self.worker.run(job) for job in jobs}


def advantage_sign(sample: Any) -> int:
    return 1 if max(sample.advantages) > 0 else -1 if min(sample.advantages) < 0 else 0


def mean_by_sign(changes: list[float], signs: list[int], sign: int) -> float | None:
    picked = [c for c, s in zip(changes, signs, strict=True) if s == sign]
    return statistics.fmean(picked) if picked else None


CONTROL_TOLERANCE = 1e-3  # nats: how far an update at lr 0 may move a build's summed log-prob (float noise)


def check_control(row: dict[str, Any]) -> None:
    """The lr-0 update must leave every build's log-prob where it was; if not, the measurement (not the update)
    moves it, and no figure of this run means anything."""
    worst = max(abs(c) for key, changes in row.items() if key.endswith("_changes") for c in changes)
    if worst > CONTROL_TOLERANCE:
        raise SystemExit(f"update_direction: an update at lr 0 moved a build's log-prob by {worst:.4f} nats "
                         f"(> {CONTROL_TOLERANCE}): the before/after policies differ without an update")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 1e-4, 3e-4, 7e-4, 2e-3])
    ap.add_argument("--eps", type=float, nargs="+", help="AdamW epsilons to try each rate with (default: the config's)")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the config")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    cfg = load_config(TrainBuilderConfig, [*args.overrides, f"learner.group_size={args.group_size}",
                                           "learner.batch_size=1", "learner.filter_flat_groups=false"],
                      config_file=args.config)
    cfg.rollout.backend, cfg.rollout.options = learner_model(cfg.rollout)  # the learner's own model samples here
    if cfg.data.train_corpora < 2:
        raise SystemExit("update_direction needs data.train_corpora >= 2 (a trained and a held-out corpus)")
    sets = corpus_sets(cfg, exam=False)
    train, teacher = sets.train, sets.teacher
    everything = sets.everything()
    probes = ProbeService(LocalProbes(cfg.probe), {c.corpus_id: c.questions for c in everything}, cfg.reward)
    task = BuilderTask(cfg, train, probes, initial_utilities(everything, probes))
    worker = BuilderRolloutWorker(cfg.rollout, cfg.reward)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    policy = worker.backend
    base_model = copy.deepcopy(policy.model)  # the worker's model takes the SFT policy's merged weights below

    def learner() -> Learner:
        return Learner(copy.deepcopy(base_model), cfg.learner, pad_id=policy.pad_id, tokenizer=policy.tokenizer)

    started = time.perf_counter()
    sft_dir = out / "sft"
    if not (sft_dir / "learner.json").is_file():
        samples, kept = teacher_samples(cfg, LocalSession(worker), task, teacher)
        fresh = learner()
        history = fine_tune(fresh, samples, epochs=cfg.sft.epochs, batch_size=cfg.sft.batch_size, seed=cfg.seed,
                            lr=cfg.sft.lr or None, eps=cfg.sft.eps or None)
        print(f"SFT on {kept}: loss {history[0]['sft_loss']:.4f} -> {history[-1]['sft_loss']:.4f}", flush=True)
        fresh.save(sft_dir)
    base = learner()
    base.load(sft_dir)
    worker.load(base.publish_weights()[1])

    groups: dict[str, dict[str, Any]] = {}
    for name, step in (("trained", 0), ("held_out", 1)):
        jobs = task.jobs(step, base.version)
        records = [r for job in jobs for r in worker.run(job)]
        rewards, details = task.turn_rewards(records)
        samples, _ = policy_samples(Scored(records, rewards, details), cfg.learner)
        groups[name] = {"corpus": jobs[0].corpus_id, "finals": [w.final for w in details], "samples": samples,
                        "signs": [advantage_sign(s) for s in samples], "before": base.sequence_logprobs(samples)}
        print(f"{name} group on {jobs[0].corpus_id}: U per build {groups[name]['finals']}", flush=True)
    del base

    rows, controls = [], []
    for eps in args.eps or [cfg.learner.eps]:
        for lr in [0.0, *(lr for lr in args.lrs if lr != 0.0)]:  # lr 0 first: the control, which must change nothing
            moved = learner()
            moved.load(sft_dir)
            moved.engine.set_step(lr, eps)
            metrics = moved.step(groups["trained"]["samples"])
            row: dict[str, Any] = {"eps": eps, "lr": lr, "grad_norm": metrics["grad_norm"]}
            for name, g in groups.items():
                changes = [a - b for a, b in zip(moved.sequence_logprobs(g["samples"]), g["before"], strict=True)]
                row[f"{name}_success"] = mean_by_sign(changes, g["signs"], 1)
                row[f"{name}_failure"] = mean_by_sign(changes, g["signs"], -1)
                row[f"{name}_changes"] = [round(c, 4) for c in changes]
            print({k: v for k, v in row.items() if not k.endswith("changes")}, flush=True)
            if lr == 0.0:
                check_control(row)
            (controls if lr == 0.0 else rows).append(row)

    results = {"config": args.config, "group_size": args.group_size, "overrides": args.overrides,
               "groups": {n: {k: g[k] for k in ("corpus", "finals", "signs", "before")} for n, g in groups.items()},
               "updates": rows, "controls": controls, "wall_s": time.perf_counter() - started}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if rows:  # only the lr-0 controls ran: nothing to plot
        plot(rows, out / "update_direction.png")
    print(f"wrote {out / 'results.json'}" + (f" and {out / 'update_direction.png'}" if rows else ""))
    return 0


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epsilons = sorted({r["eps"] for r in rows})
    fig, axes = plt.subplots(1, len(epsilons), figsize=(6.5 * len(epsilons), 4), squeeze=False)
    for ax, eps in zip(axes[0], epsilons, strict=True):
        mine = [r for r in rows if r["eps"] == eps]
        for key, style in (("trained_success", "g-o"), ("trained_failure", "r-o"), ("held_out_success", "g--s"),
                           ("held_out_failure", "r--s")):
            points = [(r["lr"], r[key]) for r in mine if r[key] is not None]
            if points:
                ax.plot(*zip(*points, strict=True), style, label=key.replace("_", " "))
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_xlabel("learning rate of the one update")
        ax.set_ylabel("mean change of a build's summed log-prob (nats)")
        ax.set_title(f"One GRPO update from the SFT policy (AdamW eps {eps:g})")
        if ax.get_legend_handles_labels()[0]:  # a group whose builds all scored alike has no success or no failure
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
