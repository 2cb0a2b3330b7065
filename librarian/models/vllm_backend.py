"""The `vllm` backend: a `PolicyBackend` whose samples come from a vLLM engine, with live weight updates.

The main environment never imports vLLM (verl pins transformers < 5.11,
vLLM needs >= 5.16.1): this object renders and tokenizes prompts with the
model's own chat template (exactly as the `hf` backend does, so both see the
same prompt ids), sends the ids to a `VLLMEngine` in a child process running
the vLLM environment's interpreter (`.venv-vllm`; `vllm_client`), and builds
the same `Sample`s as `hf`: generated ids (end-of-turn token included),
log-probs of the sampled tokens under the distribution they were drawn from,
prompt ids, finish reason, text cut right after a stop string. Each sample's
`extra["policy_version"]` is the weights version that produced it.

With `params.seed`, sample j of conversation i is seeded with
`derive_seed(params.seed, i, j)` (vLLM seeds each request, so identical
prompts of a GRPO group would otherwise come out identical). Under
`params.grammar` the engine decodes with vLLM's structured outputs
(xgrammar) and the log-probs are those of the constrained distribution.

`load_weights(payload)` takes what the learner publishes (`version`, `kind`
'lora' | 'full', `state`, `lora`, `node`) and loads it without restarting the
engine. Full weights can also come by NCCL broadcast from the learner
(`weight_transfer="nccl"`: `init_nccl` once, `receive_nccl` per update, with
`weight_transfer.nccl.NcclWeightSender` on the learner). A Ray rollout actor owns one
`VLLMBackend` and calls these between steps; `mode="inprocess"` needs vLLM
importable in the actor's own interpreter (the rollout image's actors run the
trainer environment, so there it is `subprocess`).

The engine must get the GPUs it is configured for: with `CUDA_VISIBLE_DEVICES`
set (Ray sets it for an actor that reserves GPUs) an engine whose
`tensor_parallel_size` x `pipeline_parallel_size` exceeds the visible GPUs is
refused before it starts, and one that leaves some of them idle is logged.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from librarian.models.base import (
    BackendError,
    Message,
    Sample,
    SamplingParams,
    ToolSchema,
    check_conversations,
    derive_seed,
)
from librarian.models.chat import END_OF_TURN, TemplatePrompts, end_token_ids
from librarian.models.vllm_client import EngineProcess, InProcessEngine, default_python
from librarian.models.vllm_models import resolve_model_folder
from librarian.models.vllm_protocol import EngineConfig
from librarian.models.weight_transfer.payloads import (
    check_same_node,
    cuda_ipc_handles,
    write_full_weights,
    write_lora_adapter,
)

log = logging.getLogger(__name__)
KEEP_WEIGHT_VERSIONS = 2


class VLLMBackend(TemplatePrompts):
    """`PolicyBackend` over a vLLM engine (child process or in-process); see the module docstring."""

    def __init__(self, model: str | Path = "smollm2", *, mode: str = "auto", python: str | Path | None = None,
                 enable_lora: bool = False, max_lora_rank: int = 16, dtype: str = "float32", seed: int = 0,
                 max_model_len: int = 2048, enforce_eager: bool = True, single_process: bool = True,
                 weight_transfer: str = "file",
                 engine_kwargs: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 model_root: str | Path | None = None, scratch_dir: str | Path | None = None,
                 start_timeout_s: float = 900.0, policy_version: int = -1, name: str | None = None) -> None:
        if mode not in ("auto", "subprocess", "inprocess"):
            raise BackendError(f"vllm backend: mode must be 'auto', 'subprocess' or 'inprocess', got {mode!r}")
        self.world = engine_world(engine_kwargs or {}, single_process)
        self.folder = resolve_model_folder(model, root=model_root)
        self.tokenizer = _load_tokenizer(self.folder)
        self.end_ids = end_token_ids(self.tokenizer)
        # the tokens that end a constrained sample: `constrained.GrammarCompiler`'s stop tokens (the learner
        # replays its masks with them), so the engine bans the other end ids once a grammar has terminated
        end = self.tokenizer.convert_tokens_to_ids(END_OF_TURN)
        self.grammar_stop_ids: list[int] | None = [end] if isinstance(end, int) and end >= 0 else None
        extra_kwargs: dict[str, Any] = {}
        extra_env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
        if single_process:  # engine core and model in one process: one vLLM import instead of three
            extra_kwargs["distributed_executor_backend"] = "uni"
            extra_env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_NUM_OF_RESERVED_CPU="0")
        self.cfg = EngineConfig(model=str(self.folder), dtype=dtype, seed=seed, max_model_len=max_model_len,
                                enable_lora=enable_lora, max_lora_rank=max_lora_rank, enforce_eager=enforce_eager,
                                weight_transfer=weight_transfer, engine_kwargs={**extra_kwargs, **(engine_kwargs or {})},
                                env={**extra_env, **(env or {})})
        exe = Path(python) if python else default_python()
        if mode == "auto":
            mode = "subprocess" if exe is not None else "inprocess" if _vllm_importable() else ""
            if not mode:
                raise BackendError("vllm backend: no vLLM environment (.venv-vllm) and vLLM is not importable "
                                   "here; run `make vllm-env` or set LIBRARIAN_VLLM_PYTHON")
        if mode == "subprocess" and exe is None:
            raise BackendError("vllm backend: no vLLM interpreter found; run `make vllm-env` or pass python=")
        if mode == "inprocess" and not _vllm_importable():
            raise BackendError(f"vllm backend: mode='inprocess' needs vLLM importable by {sys.executable}, and it is "
                               "not (in the rollout image actors run the trainer environment and vLLM lives in "
                               "/opt/vllm-env); use mode='subprocess' with python=/opt/vllm-env/bin/python")
        self.mode = mode
        self._warned_nccl = False
        self.engine: Any = (EngineProcess(self.cfg, exe, start_timeout_s=start_timeout_s)  # type: ignore[arg-type]
                            if mode == "subprocess" else InProcessEngine(self.cfg))
        self.policy_version = policy_version
        self.name = name or f"vllm:{self.folder.name}"
        self._scratch = Path(scratch_dir) if scratch_dir else Path(tempfile.mkdtemp(prefix="librarian-vllm-weights-"))
        self._own_scratch = scratch_dir is None
        self._written: list[Path] = []
        self.last_generate_s = 0.0
        # closes the engine and removes the scratch folder on close(), garbage collection or interpreter exit
        self._finalizer = weakref.finalize(self, _release, self.engine, self._scratch if self._own_scratch else None)

    # -- PolicyBackend -------------------------------------------------------------------------------
    def generate(self, conversations: Sequence[Sequence[Message]], tools: Sequence[ToolSchema] | None,
                 params: SamplingParams) -> list[list[Sample]]:
        convs = check_conversations(conversations)
        if not convs:
            return []
        return self.generate_from_ids([self.encode_prompt(c, tools) for c in convs], params)

    def generate_from_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        """Like `generate`, from token-id prompts (the GRPO group: `params.n` samples per prompt)."""
        prompts = [list(map(int, p)) for p in prompts]
        too_long = [i for i, p in enumerate(prompts) if len(p) + params.max_new_tokens > self.cfg.max_model_len]
        if too_long:
            raise BackendError(f"{self.name}: prompt {too_long[0]} has {len(prompts[too_long[0]])} tokens; with "
                               f"max_new_tokens={params.max_new_tokens} it exceeds max_model_len={self.cfg.max_model_len}")
        wire = {"n": params.n, "max_new_tokens": params.max_new_tokens, "temperature": float(params.temperature),
                "top_p": float(params.top_p), "seed": params.seed, "stop": list(params.stop),
                "stop_token_ids": self.end_ids}
        if params.seed is not None and not params.greedy:  # one seed per sample: identical prompts still differ
            wire["seeds"] = [[derive_seed(params.seed, i, j) for j in range(params.n)] for i in range(len(prompts))]
        if params.grammar:
            wire["grammar"] = params.grammar
            wire["grammar_stop_ids"] = self.grammar_stop_ids
        if params.grammars is not None:  # one per prompt: the engine decodes them all in one batch
            wire["grammars"] = params.for_prompts(len(prompts))
            wire["grammar_stop_ids"] = self.grammar_stop_ids
        start = time.perf_counter()
        rows = self.engine.call("generate", prompts=prompts, params=wire)
        self.last_generate_s = time.perf_counter() - start
        version = self.policy_version
        extra = {"policy_version": version, "backend": "vllm"}
        return [[self._sample(list(c["token_ids"]), list(c["logprobs"]), prompt, params, dict(extra)) for c in row]
                for prompt, row in zip(prompts, rows, strict=True)]

    # -- weight sync -----------------------------------------------------------------------------------
    def load_weights(self, payload: Any) -> int:
        """Load a published policy (`version`, `kind` 'lora' | 'full', `state`, `lora`); returns its version.

        Older versions than the loaded one are refused, so a worker never goes back in time. Full weights
        travel as a file, or as CUDA IPC handles when `weight_transfer='ipc'` (the learner's GPU tensors, on this
        node only). Under `weight_transfer='nccl'` a payload that still comes this way is loaded from a file (and
        said once): the broadcast is `init_nccl` + `receive_nccl`, driven by the learner.
        """
        version = int(payload.version)
        if version < self.policy_version:
            raise BackendError(f"refusing weights version {version}: version {self.policy_version} is already loaded")
        if payload.kind == "lora":
            if not self.cfg.enable_lora:
                raise BackendError(f"{self.name}: a LoRA payload needs an engine started with enable_lora=True")
            rank = int(payload.lora.get("rank", 0))
            if rank > self.cfg.max_lora_rank:
                raise BackendError(f"{self.name}: LoRA rank {rank} exceeds max_lora_rank={self.cfg.max_lora_rank}")
            folder = write_lora_adapter(self._fresh(f"lora-v{version}"), payload.state, payload.lora, str(self.folder))
            self.engine.call("load_lora", version=version, path=str(folder))
        elif payload.kind == "full":
            if self.cfg.weight_transfer == "ipc":
                check_same_node(str(getattr(payload, "node", "") or ""))
                handles = getattr(payload, "ipc", "") or cuda_ipc_handles(payload.state)  # the learner's own handles
                self.engine.call("load_full_ipc", version=version, handles=handles)
            else:
                if self.cfg.weight_transfer == "nccl" and not self._warned_nccl:
                    log.warning("%s: full weights came through the object store although weight_transfer='nccl'; "
                                "loading them from a file (the NCCL path is init_nccl + receive_nccl)", self.name)
                    self._warned_nccl = True
                path = write_full_weights(self._fresh(f"full-v{version}") / "model.safetensors", payload.state)
                self.engine.call("load_full_file", version=version, path=str(path))
        else:
            raise BackendError(f"{self.name}: weights kind must be 'lora' or 'full', got {payload.kind!r}")
        self.policy_version = version
        return version

    def sleep(self, level: int = 1) -> dict[str, Any]:
        """Free the engine's GPU memory while a colocated learner updates (vLLM's `LLM.sleep(level)`: 1 offloads
        the weights to CPU memory, 2 drops them); needs `engine_kwargs={"enable_sleep_mode": True}`, without it
        the engine keeps its memory (and says so in the answer)."""
        return dict(self.engine.call("sleep", level=int(level)))

    def wake_up(self) -> dict[str, Any]:
        """The engine's memory back after `sleep`; call it before the next generate or weight load."""
        return dict(self.engine.call("wake_up"))

    def nccl_ranks(self) -> int:
        """How many ranks this engine adds to the NCCL weight-sync group (its tensor x pipeline parallel size)."""
        return self.world

    def init_nccl(self, init_info: dict[str, Any]) -> Any:
        """Join the learner's NCCL group with `NcclWeightSender.init_info(i)`; blocks until everyone has joined,
        so call it while the learner runs `NcclWeightSender.connect()`."""
        if self.cfg.weight_transfer != "nccl":
            raise BackendError(f"{self.name}: init_nccl needs an engine started with weight_transfer='nccl' "
                               f"(this one has {self.cfg.weight_transfer!r})")
        return self.engine.call("init_nccl", init_info=dict(init_info))

    def receive_nccl(self, version: int, update_info: dict[str, Any]) -> int:
        """Receive full weights the learner broadcasts meanwhile (`NcclWeightSender.send`), described by
        `weight_transfer.nccl.update_info(meta)`; vLLM loads each packed buffer as it arrives."""
        version = int(version)
        if version < self.policy_version:
            raise BackendError(f"refusing weights version {version}: version {self.policy_version} is already loaded")
        self.engine.call("load_full_nccl", version=version, update_info=dict(update_info))
        self.policy_version = version
        return version

    def close_nccl(self) -> None:
        """Leave the NCCL group (before a new one is made, e.g. after an engine restarted)."""
        self.engine.call("close_nccl")

    def _fresh(self, name: str) -> Path:
        folder = self._scratch / f"{name}-{len(self._written)}"
        self._written.append(folder)
        for old in self._written[:-KEEP_WEIGHT_VERSIONS]:
            shutil.rmtree(old, ignore_errors=True)
        self._written = self._written[-KEEP_WEIGHT_VERSIONS:]
        return folder

    # -- lifetime --------------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return dict(self.engine.call("info"))

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release(engine: Any, scratch: Path | None) -> None:
    try:
        engine.close()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise BackendError(f"vllm backend: cannot read the tokenizer in {folder}: {exc}") from None


def engine_world(engine_kwargs: dict[str, Any], single_process: bool) -> int:
    """GPUs one engine uses (tensor x pipeline parallel), checked against the GPUs this process may see."""
    world = int(engine_kwargs.get("tensor_parallel_size", 1)) * int(engine_kwargs.get("pipeline_parallel_size", 1))
    if world < 1:
        raise BackendError(f"vllm backend: tensor_parallel_size x pipeline_parallel_size must be >= 1, got {world}")
    if world > 1 and single_process and "distributed_executor_backend" not in engine_kwargs:
        raise BackendError(f"vllm backend: an engine over {world} GPUs needs single_process=False (vLLM's 'uni' "
                           "executor runs one model worker)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        count = len([d for d in visible.split(",") if d.strip()])
        if count < world:
            raise BackendError(f"vllm backend: tensor_parallel_size x pipeline_parallel_size = {world} but this "
                               f"process sees {count} GPU(s) (CUDA_VISIBLE_DEVICES={visible}); reserve {world} "
                               "per worker (rollout.gpus_per_worker / probe.gpus_per_worker)")
        if count > world:
            log.warning("vllm backend: %d GPU(s) visible, the engine uses %d; the rest stay idle", count, world)
    return world


def _vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


def make_vllm_backend(model: str = "smollm2", **kwargs: Any) -> VLLMBackend:
    """Registry entry: `model` is 'smollm2', 'tiny' or an HF folder; options as `VLLMBackend`."""
    return VLLMBackend(model, **kwargs)
