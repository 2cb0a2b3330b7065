"""vLLM rollouts under a LoRA policy: the adapter in the engine against the adapter folded into full weights.

    python benchmarks/lora_publish_bench.py --out build/bench/lora_publish [--group 16 --max-new-tokens 150]

What `learner.lora.publish` chooses between. SmolLM2-135M-Instruct wrapped with a random rank-16 LoRA on all
seven projections (B drawn small, so the adapter moves the policy) is published both ways: as an adapter
(`publish=adapter`: an engine started with `enable_lora`, which loads the adapter folder) and merged
(`publish=merged`: `lora.merged_state`, full weights W + alpha/rank BA, loaded by an engine without LoRA). Each
engine starts in turn (2 cores: never both at once), gets a GRPO-shaped batch (one prompt with a long shared
opening, `--group` samples, temperature 1; a warm-up call first) and is timed over `--repeats` calls. Every
token each engine sampled is re-scored by the peft model in one forward pass. OUT/results.json:
`tokens_per_s_adapter`, `tokens_per_s_merged`, `merged_vs_adapter_tokens_per_s_ratio`, `merge_s` (computing the
merged weights), `logprob_max_abs_diff_adapter|merged` (both should be within 1e-3) and the engine start times;
OUT/lora_publish.png compares them. This measures the rollout engine's speed, not learning.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rollout_bench import logprob_diff, timed  # noqa: E402 (this folder: run as a script)

from librarian.learner import LoraConfig, WeightsPayload, lora  # noqa: E402
from librarian.models import SamplingParams  # noqa: E402
from librarian.models.hf import make_hf_backend  # noqa: E402
from librarian.models.vllm_backend import VLLMBackend  # noqa: E402
from librarian.models.vllm_models import smollm2_hf_folder  # noqa: E402

log = logging.getLogger("lora_publish_bench")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
OPENING = ("You build an index over the files of a workspace so that a reader finds every member of a group. "
           "Each file holds one sentence about one person: where they live and what they do. ") * 24


def conversation(i: int) -> list[dict[str, str]]:
    """One build's opening: a long shared system prompt (~900 tokens), then its own task."""
    return [{"role": "system", "content": OPENING},
            {"role": "user", "content": f"Task {i}: list the people who work as bakers, then write the index."}]


def random_adapter(model: Any, cfg: LoraConfig, seed: int) -> Any:
    """`model` wrapped with LoRA whose B is drawn small (an adapter that moves the policy), the seed fixed."""
    import torch

    peft_model = lora.wrap(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
    return peft_model.eval()


def bench_engine(folder: Path, payload: WeightsPayload, enable_lora: bool, args: argparse.Namespace,
                 model: Any) -> dict[str, Any]:
    params = SamplingParams(n=args.group, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=args.seed)
    start = time.perf_counter()
    engine = VLLMBackend(folder, dtype="float32", enable_lora=enable_lora, max_lora_rank=args.rank,
                         max_model_len=4096, seed=args.seed, env={"OMP_NUM_THREADS": str(args.threads)})
    start_s = time.perf_counter() - start
    try:
        load = time.perf_counter()
        engine.load_weights(payload)
        load_s = time.perf_counter() - load
        seconds, tokens, rows = timed(engine, [conversation(0)], params, args.repeats)
    finally:
        engine.close()
    diff = logprob_diff(model, rows, 1.0)
    kind = "adapter" if enable_lora else "merged"
    log.info("%s: %d tokens in %.1f s (%.1f tokens/s), largest log-prob difference %.1e", kind, tokens, seconds,
             tokens / seconds, diff)
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 2),
            "engine_start_s": round(start_s, 1), "load_s": round(load_s, 2), "logprob_max_abs_diff": diff}


def plot(path: Path, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    kinds = ["adapter", "merged"]
    a.bar(kinds, [results[f"tokens_per_s_{k}"] for k in kinds], color=["tab:gray", "tab:blue"])
    a.set_title("vLLM decode tokens/s (CPU)")
    b.bar(kinds, [results[f"logprob_max_abs_diff_{k}"] for k in kinds], color=["tab:gray", "tab:blue"])
    b.axhline(1e-3, color="tab:red", linestyle="--", label="1e-3")
    b.set_title("largest log-prob difference vs the peft model")
    b.legend(fontsize=8)
    fig.suptitle(f"LoRA in the engine vs merged: {results['merged_vs_adapter_tokens_per_s_ratio']:.2f}x tokens/s")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-root", type=Path, default=Path("build/models"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    folder = smollm2_hf_folder(root=args.model_root)
    cfg = LoraConfig(rank=args.rank, alpha=2 * args.rank, target_modules=TARGETS)
    model = random_adapter(make_hf_backend(str(folder), dtype=torch.float32).model, cfg, args.seed)
    shape = {k: v for k, v in cfg.shape().items() if k != "enabled"}
    adapter = WeightsPayload(0, "lora", lora.adapter_state(model), shape)
    start = time.perf_counter()
    merged = WeightsPayload(0, "full", lora.merged_state(model))
    merge_s = time.perf_counter() - start
    runs = {"adapter": bench_engine(folder, adapter, True, args, model),
            "merged": bench_engine(folder, merged, False, args, model)}
    results: dict[str, Any] = {
        "group": args.group, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "rank": args.rank,
        "threads": args.threads, "merge_s": round(merge_s, 2),
        **{f"tokens_per_s_{k}": r["tokens_per_s"] for k, r in runs.items()},
        **{f"logprob_max_abs_diff_{k}": r["logprob_max_abs_diff"] for k, r in runs.items()},
        "merged_vs_adapter_tokens_per_s_ratio": round(runs["merged"]["tokens_per_s"] / runs["adapter"]["tokens_per_s"],
                                                      3),
        "runs": runs, "load_average": list(os.getloadavg()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot(args.out / "lora_publish.png", results)
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=2))
    print(f"wrote {args.out / 'results.json'} and {args.out / 'lora_publish.png'}")


if __name__ == "__main__":
    main()
