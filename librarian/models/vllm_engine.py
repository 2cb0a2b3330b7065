"""The vLLM engine a rollout worker owns: token-id prompts in, samples with log-probs out, weights swapped live.

This module imports vLLM and therefore runs where vLLM is installed: the
engine process started from `.venv-vllm` on CPU machines (`vllm_worker`), or
directly inside a rollout actor whose image has stock vLLM (GPU clusters).
Nothing in the main environment imports it.

Log-probs are vLLM's `processed_logprobs`: the distribution each token was
drawn from (after temperature and top-p, and after a grammar's token
bitmask, which vLLM applies to the logits before its sampler), the same
convention as the `hf` backend and the learner. Seeded samples are one
request each with their own seed (`params["seeds"]`), since vLLM seeds
requests separately. Weight updates never restart the engine: a LoRA
adapter is registered under a fresh id and used for every later request;
full weights are loaded inside each vLLM worker, from a file or CUDA IPC
handles (`vllm_extension.WeightSyncExtension`) or, with
`weight_transfer="nccl"`, by vLLM's own NCCL weight-transfer engine
(`init_weight_transfer_engine`, then `start_weight_update` /
`update_weights` / `finish_weight_update` per update, which streams packed
buffers into the model layer by layer); then the prefix cache is reset so no
KV block computed by older weights is reused. On CPU, prefills are never
split across scheduler steps (`whole_prefills_on_cpu`): vLLM cannot rewind a
CPU generator, so a split seeded prefill would fail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any

from librarian.models.vllm_protocol import EngineConfig
from librarian.models.weight_transfer.nccl import accept_init_info, nccl_version

log = logging.getLogger(__name__)
EXTENSION = "librarian.models.vllm_extension.WeightSyncExtension"
CPU_STEP_TOKENS = 4096  # vLLM's own default step budget on CPU for the offline engine


def whole_prefills_on_cpu(max_model_len: int) -> dict[str, Any]:
    """On a CPU platform: no chunked prefill, and a step budget that holds the longest prompt. vLLM rewinds a seeded
    request's generator after a split prefill, which CPU generators cannot do ("CPU Generator does not use
    offset"), so a batch of long seeded prompts would fail; whole prefills only wait for the next step."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, CPU_STEP_TOKENS)}


class VLLMEngine:
    """One `vllm.LLM` plus the adapter and policy version it currently serves."""

    def __init__(self, cfg: EngineConfig) -> None:
        for key, value in cfg.env.items():
            os.environ[key] = str(value)
        from vllm import LLM

        self.cfg = cfg
        kwargs: dict[str, Any] = dict(
            model=cfg.model, tokenizer=cfg.model, dtype=cfg.dtype, seed=cfg.seed, max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager, logprobs_mode="processed_logprobs", generation_config="vllm",
            worker_extension_cls=EXTENSION, structured_outputs_config={"backend": "xgrammar"},
        )
        kwargs.update(whole_prefills_on_cpu(cfg.max_model_len))
        if cfg.enable_lora:
            kwargs.update(enable_lora=True, max_lora_rank=cfg.max_lora_rank, max_loras=1)
        if cfg.weight_transfer == "nccl":
            kwargs["weight_transfer_config"] = {"backend": "nccl"}
        kwargs.update(cfg.engine_kwargs)
        start = time.perf_counter()
        self.llm = LLM(**kwargs)
        self.start_s = time.perf_counter() - start
        self.version = -1
        self.lora: Any = None
        self._next_lora_id = 1

    def info(self) -> dict[str, Any]:
        import torch
        import vllm

        return {"vllm": vllm.__version__, "torch": torch.__version__, "nccl": nccl_version(), "model": self.cfg.model,
                "start_s": round(self.start_s, 3), "policy_version": self.version,
                "lora": None if self.lora is None else self.lora.lora_path}

    def generate(self, prompts: list[list[int]], params: dict[str, Any]) -> list[list[dict[str, Any]]]:
        """For each token-id prompt, `params['n']` samples: token ids, their log-probs, finish reason.

        `params['seeds'][i][j]` (optional) seeds sample j of prompt i: each sample is then its own request
        with n=1 (vLLM seeds requests separately, so identical prompts with one seed would give identical
        samples). Without it, `params['seed']` seeds each prompt's request (vLLM's children get seed + j).
        `params['grammar']` (optional) is an xgrammar EBNF grammar every sample follows (structured
        outputs), or `params['grammars']` one per prompt; once it has terminated, only
        `params['grammar_stop_ids']` may end the sample.
        """
        from vllm import SamplingParams, TokensPrompt

        if not prompts:
            return []
        if any(not p or not all(isinstance(t, int) for t in p) for p in prompts):
            raise ValueError("every prompt must be a non-empty list of token ids")
        n = int(params["n"])
        greedy = float(params["temperature"]) == 0.0
        seeds = None if greedy else params.get("seeds")
        if seeds is not None and (len(seeds) != len(prompts) or any(len(row) != n for row in seeds)):
            raise ValueError(f"params['seeds'] must hold {n} seed(s) for each of the {len(prompts)} prompt(s)")
        stop_ids = [int(t) for t in params.get("stop_token_ids") or []]
        grammars = params.get("grammars") or [params.get("grammar")] * len(prompts)
        if len(grammars) != len(prompts):
            raise ValueError(f"params['grammars'] holds {len(grammars)} grammars for {len(prompts)} prompts")
        bias = self._grammar_bans(stop_ids, params.get("grammar_stop_ids")) if any(grammars) else None

        def sampling(count: int, seed: Any, grammar: Any) -> Any:
            extra: dict[str, Any] = {}
            if grammar:
                from vllm.sampling_params import StructuredOutputsParams

                extra["structured_outputs"] = StructuredOutputsParams(grammar=str(grammar))
                if bias:
                    extra["logit_bias"] = dict(bias)
            return SamplingParams(
                n=count, max_tokens=int(params["max_new_tokens"]),
                temperature=float(params["temperature"]), top_p=float(params.get("top_p", 1.0)), top_k=-1,
                seed=None if seed is None else int(seed), stop=list(params.get("stop") or []) or None,
                stop_token_ids=list(stop_ids), include_stop_str_in_output=True,
                logprobs=0, skip_special_tokens=True, **extra,
            )

        if seeds is not None:  # one request per sample, in prompt-major order
            requests = [(i, sampling(1, seed, grammars[i])) for i, row in enumerate(seeds) for seed in row]
        else:
            requests = [(i, sampling(1 if greedy else n, params.get("seed"), grammars[i])) for i in range(len(prompts))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(prompts[i])) for i, _ in requests],
                                 [sp for _, sp in requests], use_tqdm=False, lora_request=self.lora)
        results: list[list[dict[str, Any]]] = [[] for _ in prompts]
        for (i, _), out in zip(requests, outs, strict=True):
            results[i].extend(_completion(c) for c in sorted(out.outputs, key=lambda c: c.index))
        if greedy:
            results = [row * n for row in results]
        return results

    def _grammar_bans(self, stop_ids: list[int], grammar_stop_ids: Any) -> dict[int, float]:
        """-inf logit biases for the end ids a terminated grammar must not emit.

        vLLM's grammar matcher lets every stop token of the request (ours plus the tokenizer's eos) end a
        constrained sample; the learner replays the masks of `constrained.GrammarCompiler`, whose only stop
        is the end-of-turn token. Banning the others makes the sampler's allowed sets, and so its
        log-probs, those of the replayed masks. Outside the terminated state the grammar masks them anyway.
        """
        if not grammar_stop_ids:
            return {}
        eos = getattr(self.llm.get_tokenizer(), "eos_token_id", None)
        ends = set(stop_ids) | ({int(eos)} if isinstance(eos, int) and eos >= 0 else set())
        return {t: float("-inf") for t in sorted(ends - {int(t) for t in grammar_stop_ids})}

    def load_lora(self, version: int, path: str) -> dict[str, Any]:
        """Serve the adapter in folder `path` (peft format) from now on, as policy `version`."""
        from vllm.lora.request import LoRARequest

        if not self.cfg.enable_lora:
            raise ValueError("this engine was started without LoRA (enable_lora=False)")
        self._check_version(version)
        request = LoRARequest(lora_name=f"policy-v{version}-{self._next_lora_id}", lora_int_id=self._next_lora_id,
                              lora_path=path)
        self._next_lora_id += 1
        if not self.llm.llm_engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the LoRA adapter in {path}")
        if self.lora is not None:
            self.llm.llm_engine.remove_lora(self.lora.lora_int_id)
        self.lora = request
        self.version = version
        return {"policy_version": version, "lora_id": request.lora_int_id}

    def load_full_file(self, version: int, path: str) -> dict[str, Any]:
        """Load full weights from a safetensors file (HF parameter names) into every worker."""
        self._check_version(version)
        counts = self.llm.collective_rpc("librarian_load_file", args=(path,))
        return self._loaded_full(version, counts)

    def load_full_ipc(self, version: int, handles: str) -> dict[str, Any]:
        """Load full weights from CUDA IPC handles (a trainer on the same node; `weight_transfer.payloads.cuda_ipc_handles`)."""
        self._check_version(version)
        counts = self.llm.collective_rpc("librarian_load_ipc", args=(handles,))
        return self._loaded_full(version, counts)

    def init_nccl(self, init_info: dict[str, Any]) -> dict[str, Any]:
        """Join the trainer's NCCL group (`weight_transfer.nccl.NcclWeightSender.init_info`); the trainer joins concurrently.
        A trainer whose NCCL version differs from this engine's is refused before anything is opened."""
        if self.cfg.weight_transfer != "nccl":
            raise ValueError("this engine was started without weight_transfer='nccl'")
        init_info = accept_init_info(init_info, nccl_version())
        self.llm.init_weight_transfer_engine({"init_info": init_info})
        return {"rank_offset": init_info.get("rank_offset"), "world_size": init_info.get("world_size")}

    def load_full_nccl(self, version: int, update_info: dict[str, Any]) -> dict[str, Any]:
        """Receive full weights the trainer broadcasts meanwhile (names, dtype_names, shapes in send order)."""
        self._check_version(version)
        self.llm.start_weight_update()
        try:
            self.llm.update_weights({"update_info": dict(update_info)})
        except BaseException:
            with contextlib.suppress(Exception):  # leave no update open; the original error is the one to see
                self.llm.finish_weight_update()
            raise
        self.llm.finish_weight_update(str(version))
        return self._loaded_full(version, [len(update_info.get("names", []))])

    def close_nccl(self) -> dict[str, Any]:
        """Leave the trainer's NCCL group; the engine keeps serving."""
        self.llm.shutdown_weight_transfer_engine()
        return {}

    def sleep(self, level: int) -> dict[str, Any]:
        """Free the GPU memory for a colocated learner: level 1 offloads the weights to CPU memory, level 2 drops
        them (the next full-weight load brings new ones); the KV cache is dropped either way (`LLM.sleep`). An
        engine started without `enable_sleep_mode` (vLLM on CPU has none) keeps its memory and says so."""
        if not self.cfg.engine_kwargs.get("enable_sleep_mode"):
            return {"asleep": False, "why": "started without engine_kwargs.enable_sleep_mode"}
        if int(level) not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level!r}")
        self.llm.sleep(level=int(level))
        return {"asleep": True, "level": int(level)}

    def wake_up(self) -> dict[str, Any]:
        """The engine's memory back after `sleep` (`LLM.wake_up`); no KV block from before is reused."""
        if not self.cfg.engine_kwargs.get("enable_sleep_mode"):
            return {"asleep": False}
        self.llm.wake_up()
        self.llm.reset_prefix_cache()
        return {"asleep": False}

    def _loaded_full(self, version: int, counts: list[Any]) -> dict[str, Any]:
        self.llm.reset_prefix_cache()
        if self.lora is not None:  # full weights replace the policy; an adapter on top would be stale
            self.llm.llm_engine.remove_lora(self.lora.lora_int_id)
            self.lora = None
        self.version = version
        return {"policy_version": version, "tensors": counts}

    def _check_version(self, version: int) -> None:
        if not isinstance(version, int) or version < self.version:
            raise ValueError(f"refusing weights version {version!r}: version {self.version} is already loaded")

    def close(self) -> None:
        shutdown = getattr(self.llm.llm_engine, "shutdown", None)
        if callable(shutdown):
            shutdown()


def _completion(c: Any) -> dict[str, Any]:
    ids = [int(t) for t in c.token_ids]
    if c.logprobs is None or len(c.logprobs) < len(ids):
        raise RuntimeError(f"vLLM returned {0 if c.logprobs is None else len(c.logprobs)} log-prob entries "
                           f"for {len(ids)} tokens")
    logprobs = [float(c.logprobs[i][t].logprob) for i, t in enumerate(ids)]
    return {"token_ids": ids, "logprobs": logprobs, "finish_reason": str(c.finish_reason),
            "stop_reason": c.stop_reason if isinstance(c.stop_reason, str | int | None) else str(c.stop_reason)}
