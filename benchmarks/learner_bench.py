"""Learner throughput: our GRPO step against TRL's `GRPOTrainer` loss on the same tiny model and batch.

Both sides train LoRA adapters (same rank, alpha, targets) of the same tiny
random Llama (SmolLM2 tokenizer), on the same batch (`batch` prompts x
`group` completions, token-mean loss, no KL, AdamW, one optimizer step per
iteration). TRL's side runs `GRPOTrainer.compute_loss` (its training loss:
per-token log-probs and entropies, clipped objective) on pre-generated
inputs, then backward and its optimizer step, so generation is excluded on
both sides. Reported: tokens/s of each (prompt + completion tokens per
second of update) and `learner_vs_trl_tokens_per_s_ratio` (target >= 1.0).

Rollout turns/s with 1 and 2 workers belongs to the Ray half of issue 7
(`librarian/cluster`) and is not measured here.

    python benchmarks/learner_bench.py --out build/bench/learner
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402, TID253
from tqdm.auto import tqdm  # noqa: E402

from librarian.learner import Learner, LearnerConfig, LoraConfig, PolicySample  # noqa: E402
from librarian.learner.lora import peft_config  # noqa: E402
from librarian.models.hf import tiny_llama  # noqa: E402

log = logging.getLogger("learner_bench")


def make_batch(n: int, prompt_len: int, completion_len: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, vocab, (n, prompt_len), generator=g)
    completions = torch.randint(0, vocab, (n, completion_len), generator=g)
    advantages = torch.randn(n, generator=g)
    old = -torch.rand(n, completion_len, generator=g) - 10.0
    return prompts, completions, advantages, old


def ours(model, tok, cfg_lora, batch, iters: int, lr: float) -> list[float]:
    prompts, completions, advantages, old = batch
    samples = []
    for i in range(prompts.shape[0]):
        ids = prompts[i].tolist() + completions[i].tolist()
        mask = [0] * prompts.shape[1] + [1] * completions.shape[1]
        lps = [0.0] * prompts.shape[1] + old[i].tolist()
        adv = [float(advantages[i]) * m for m in mask]
        samples.append(PolicySample(tuple(ids), tuple(mask), tuple(lps), tuple(adv)))
    learner = Learner(model, LearnerConfig(lr=lr, lora=cfg_lora), pad_id=tok.pad_token_id or 0)
    tokens = prompts.numel() + completions.numel()
    learner.step(samples)  # warm-up
    rates = []
    for _ in tqdm(range(iters), desc="ours", leave=False):
        start = time.perf_counter()
        learner.step(samples)
        rates.append(tokens / (time.perf_counter() - start))
    return rates


def trl(model, tok, cfg_lora, batch, iters: int, lr: float, group: int) -> list[float]:
    from datasets import Dataset  # noqa: PLC0415  (trl's input type; trl is an optional test extra)
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415  (the optional reference: a test extra)

    prompts, completions, advantages, old = batch
    n = prompts.shape[0]
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, per_device_train_batch_size=n, num_generations=group, beta=0.0,
                          loss_type="bnpo", learning_rate=lr, use_cpu=True, report_to=[], logging_steps=10**6,
                          save_strategy="no", max_completion_length=completions.shape[1], bf16=False)
        data = Dataset.from_dict({"prompt": ["hello"] * n})
        trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
                              args=args, train_dataset=data, processing_class=tok, peft_config=peft_config(cfg_lora))
        trainer.create_optimizer()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); one micro-batch per step here
        model = trainer.model
        model.train()
        inputs = {"prompt_ids": prompts, "prompt_mask": torch.ones_like(prompts),
                  "completion_ids": completions, "completion_mask": torch.ones_like(completions),
                  "advantages": advantages, "old_per_token_logps": old,
                  "num_items_in_batch": torch.tensor(float(completions.numel()))}
        tokens = prompts.numel() + completions.numel()

        def one() -> None:
            loss = trainer.compute_loss(model, inputs)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad(set_to_none=True)

        one()  # warm-up
        rates = []
        for _ in tqdm(range(iters), desc="trl", leave=False):
            start = time.perf_counter()
            one()
            rates.append(tokens / (time.perf_counter() - start))
    return rates


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json")
    parser.add_argument("--batch", type=int, default=8, help="prompts per step (paper 000 A.7: 8)")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (paper 000 A.7: 4)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--completion-len", type=int, default=64)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--rank", type=int, default=32)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    cfg_lora = LoraConfig(rank=args.rank, alpha=2 * args.rank)
    n = args.batch * args.group
    tok = tiny_llama(seed=0).tokenizer
    batch = make_batch(n, args.prompt_len, args.completion_len, 2000, seed=0)
    torch.manual_seed(0)
    ours_rates, trl_rates = [], []
    for _ in tqdm(range(2), desc="rounds"):  # interleave so drift in machine load hits both alike
        ours_rates += ours(tiny_llama(seed=0).model, tok, cfg_lora, batch, args.iters, 4e-5)
        trl_rates += trl(tiny_llama(seed=0).model, tok, cfg_lora, batch, args.iters, 4e-5, args.group)
    ours_tps, trl_tps = statistics.median(ours_rates), statistics.median(trl_rates)
    results = {
        "learner_tokens_per_s": ours_tps,
        "trl_grpo_tokens_per_s": trl_tps,
        "learner_vs_trl_tokens_per_s_ratio": ours_tps / trl_tps,
        "note": "rollout_turns_per_s_1w / _2w belong to the Ray half (librarian/cluster) and are not measured here",
        "config": {**vars(args), "sequences": n, "model": "tiny_llama(seed=0)", "torch_threads": torch.get_num_threads()},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    log.info("learner %.0f tokens/s, TRL GRPOTrainer %.0f tokens/s, ratio %.2f (target >= 1.0) -> %s",
             ours_tps, trl_tps, results["learner_vs_trl_tokens_per_s_ratio"], out / "results.json")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
