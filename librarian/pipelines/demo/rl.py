"""The RL part of `librarian demo`: the builder trained with GRPO on local Ray, on one CPU machine.

`run_rl_demo(cfg)` runs `train_builder` with the demo preset (`DEMO_PRESET`,
mirrored in configs/demo.yaml): a small KBGym universe, embedded BM25 search,
scripted KBGym reader probes, SmolLM2-135M-Instruct as the builder with LoRA
after a short SFT warm start from the scripted builder, 2 rollout workers +
1 probe worker + the learner on local Ray, MLflow under the output folder;
3 GRPO steps, then the exam (flat store, scripted builder, trained builder).
Horizons, token limits and groups are tiny because SmolLM2 generates at about
0.1-0.4 s per token on 2 busy cores: the demo shows the machinery, not a
trained builder. Returns and writes `results.json` with `grpo_steps`, `rows`
(name, f1, actions) and `wall_s`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import OmegaConf

from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.train import run

log = logging.getLogger("librarian.demo")

DEMO_PRESET: dict[str, Any] = {
    "out_dir": "build/demo/rl",
    "steps": 3,
    "checkpoint_every": 0,
    "experiment": "demo",
    "data": {"people": 60, "seed": 1, "train_corpora": 4, "exam_corpora": 2, "questions_per_corpus": 2,
             "docs_per_corpus": 6, "max_support": 3},
    "ray": {"learner_cpus": 0.5, "placement_group": True, "strategy": "PACK"},
    "rollout": {"backend": "hf", "options": {"model": "smollm2"}, "workers": 2, "cpus_per_worker": 0.5,
                "torch_threads": 1, "budget": 3, "max_new_tokens": 128, "hint_every": 0, "listing_lines": 12,
                "constrained": True, "content_executor": "extractive"},
    "probe": {"workers": 1, "budget": 6},
    "reward": {"every": 1, "max_probes": 2, "terminal": "delta", "alpha": 0.01, "lambda_tok": 0.1,
               "tok_scale": 500.0},
    "learner": {"batch_size": 2, "group_size": 2, "grad_accum": 4, "lr": 1.0e-4, "lora": {"rank": 8, "alpha": 16}},
    "sft": {"enabled": True, "corpora": 2, "budget": 8, "epochs": 1, "batch_size": 2},
    "exam": {"enabled": True, "scripted_budget": 8},
}


def demo_config(out_dir: str | None = None, overrides: dict[str, Any] | None = None) -> TrainBuilderConfig:
    """The demo preset (plus `overrides`, a nested dict), as a typed config."""
    merged = OmegaConf.merge(OmegaConf.structured(TrainBuilderConfig), DEMO_PRESET, overrides or {})
    if out_dir is not None:
        merged.out_dir = out_dir
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def run_rl_demo(cfg: TrainBuilderConfig | None = None) -> dict[str, Any]:
    """Train and examine the builder with the demo preset (or `cfg`); returns the results.json figures."""
    cfg = cfg or demo_config()
    started = time.perf_counter()
    log.info("RL demo: SmolLM2 builder, %d GRPO steps on local Ray -> %s", cfg.steps, cfg.out_dir)
    results = run(cfg)
    rows = [{"name": r["name"], "f1": r.get("f1"), "actions": r.get("actions")} for r in results["rows"]]
    print("\nbuilder exam (reader F1 and actions per question):")
    for r in rows:
        print(f"  {r['name']:<17} f1 {r['f1']:.3f}  actions {r['actions']:.2f}")
    results["wall_s"] = time.perf_counter() - started
    return {**results, "rows_brief": rows}
