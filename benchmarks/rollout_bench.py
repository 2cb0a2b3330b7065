"""Rollout benchmark: tokens/s of the `vllm` backend against the `hf` backend, and their log-prob agreement.

    python benchmarks/rollout_bench.py --out build/bench/rollout [--prompts 8 --group 4 --max-new-tokens 32]
    python benchmarks/rollout_bench.py --out OUT --device cuda --prompts 16 --group 4   # batch 64 on a GPU

For each model (the tiny random Llama and SmolLM2-135M-Instruct, both float32
HF folders loaded by both backends), at the GRPO batch shape (prompts x group
size, temperature 1): one warm-up call each, then `--repeats` timed calls;
tokens/s counts the tokens actually generated. Agreement: every token vLLM
sampled is re-scored by the `hf` model in one forward pass, and the largest
absolute log-prob difference is reported. The vLLM engine start is timed
separately and not part of tokens/s. OUT/results.json carries
`vllm_vs_hf_tokens_per_s_ratio` (SmolLM2), `vllm_vs_hf_tokens_per_s_ratio_tiny`,
`logprob_max_abs_diff` (over both models) and the per-model figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from librarian.models import SamplingParams  # noqa: E402
from librarian.models.hf import make_hf_backend  # noqa: E402
from librarian.models.vllm_backend import VLLMBackend  # noqa: E402
from librarian.models.vllm_models import smollm2_hf_folder, tiny_llama_folder  # noqa: E402

log = logging.getLogger("rollout_bench")
TOPICS = ["rivers", "bread", "chess", "volcanoes", "jazz", "bees", "glass", "comets", "tides", "maps", "salt",
          "owls", "kites", "copper", "tea", "moss"]


def conversations(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "system", "content": "You are a helpful assistant. Answer in two sentences."},
             {"role": "user", "content": f"Tell me one surprising fact about {TOPICS[i % len(TOPICS)]} (#{i})."}]
            for i in range(n)]


def timed(backend: Any, convs: list, params: Any, repeats: int) -> tuple[float, int, list]:
    backend.generate(convs[:2], None, params)  # warm-up
    seconds, tokens, rows = 0.0, 0, []
    for _ in range(repeats):
        start = time.perf_counter()
        rows = backend.generate(convs, None, params)
        seconds += time.perf_counter() - start
        tokens += sum(len(s.token_ids) for row in rows for s in row)
    return seconds, tokens, rows


def logprob_diff(model: Any, rows: list, temperature: float) -> float:
    import torch

    device = next(model.parameters()).device
    worst = 0.0
    for row in rows:
        for s in row:
            ids = torch.tensor([list(s.prompt_token_ids) + list(s.token_ids)], device=device)
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(s.prompt_token_ids) - 1:-1].float() / temperature
            ours = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids, device=device)[:, None])[:, 0]
            worst = max(worst, float((ours.cpu() - torch.tensor(s.logprobs)).abs().max()))
    return worst


def bench_model(name: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    params = SamplingParams(n=args.group, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=args.seed)
    convs = conversations(args.prompts)
    log.info("[%s] hf backend on %s", name, args.device)
    hf = make_hf_backend(str(folder), dtype=torch.float32)
    hf.model.to(args.device)
    hf_s, hf_tokens, _ = timed(hf, convs, params, args.repeats)
    log.info("[%s] hf: %d tokens in %.2f s", name, hf_tokens, hf_s)
    log.info("[%s] starting the vLLM engine", name)
    start = time.perf_counter()
    vllm = VLLMBackend(folder, dtype="float32", single_process=not args.vllm_multiprocess, seed=args.seed,
                       engine_kwargs=json.loads(args.vllm_engine_kwargs))
    start_s = time.perf_counter() - start
    try:
        v_s, v_tokens, rows = timed(vllm, convs, params, args.repeats)
        info = vllm.info()
    finally:
        vllm.close()
    log.info("[%s] vllm: %d tokens in %.2f s (engine start %.1f s)", name, v_tokens, v_s, start_s)
    diff = logprob_diff(hf.model, rows, 1.0)
    log.info("[%s] largest log-prob difference on vLLM's tokens: %.2e", name, diff)
    hf_tps, v_tps = hf_tokens / hf_s, v_tokens / v_s
    return {"model": name, "folder": str(folder), "batch": args.prompts * args.group, "hf_tokens": hf_tokens,
            "hf_seconds": round(hf_s, 4), "hf_tokens_per_s": round(hf_tps, 2), "vllm_tokens": v_tokens,
            "vllm_seconds": round(v_s, 4), "vllm_tokens_per_s": round(v_tps, 2),
            "vllm_vs_hf_tokens_per_s_ratio": round(v_tps / hf_tps, 4), "vllm_engine_start_s": round(start_s, 2),
            "logprob_max_abs_diff": diff, "engine": info}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="device of the hf backend (vLLM picks its own)")
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--model-root", type=Path, default=Path("build/models"))
    parser.add_argument("--vllm-multiprocess", action="store_true",
                        help="vLLM's default process layout (better GPU throughput, slower start)")
    parser.add_argument("--vllm-engine-kwargs", default="{}", help="JSON passed to vllm.LLM")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    folders = {"tiny": lambda: tiny_llama_folder(root=args.model_root),
               "smollm2": lambda: smollm2_hf_folder(root=args.model_root)}
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in folders]
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {sorted(folders)}")
    per_model = {name: bench_model(name, folders[name](), args) for name in names}
    results: dict[str, Any] = {
        "logprob_max_abs_diff": max(r["logprob_max_abs_diff"] for r in per_model.values()),
        "models": per_model,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "platform": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
    }
    if "smollm2" in per_model:
        results["vllm_vs_hf_tokens_per_s_ratio"] = per_model["smollm2"]["vllm_vs_hf_tokens_per_s_ratio"]
    if "tiny" in per_model:
        results["vllm_vs_hf_tokens_per_s_ratio_tiny"] = per_model["tiny"]["vllm_vs_hf_tokens_per_s_ratio"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    for key in ("vllm_vs_hf_tokens_per_s_ratio", "vllm_vs_hf_tokens_per_s_ratio_tiny", "logprob_max_abs_diff"):
        if key in results:
            print(f"{key}: {results[key]}")
    print(f"wrote {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
