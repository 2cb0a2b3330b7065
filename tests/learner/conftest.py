"""Shared pieces for the learner tests: a tiny random Llama (SmolLM2 tokenizer) and random samples."""

from __future__ import annotations

import os

import pytest
import torch  # noqa: TID253

from librarian.learner import PolicySample
from librarian.models.hf import tiny_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def tiny_model(seed: int = 0):
    return tiny_llama(seed=seed).model


@pytest.fixture(scope="session")
def pad_id() -> int:
    return tiny_llama(seed=0).pad_id


def random_samples(n: int = 4, seed: int = 0, prompt: int = 5, vocab: int = 2000):
    """`n` sequences: a prompt then generated tokens, advantages alternating in sign, old log-probs near the
    tiny model's (about -log(vocab))."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = prompt + 4 + i % 3
        ids = torch.randint(0, vocab, (length,), generator=g).tolist()
        mask = [0] * prompt + [1] * (length - prompt)
        adv = [(1.0 if i % 2 == 0 else -1.0) * m for m in mask]
        old = [-10.8 * m for m in mask]
        out.append(PolicySample(tuple(ids), tuple(mask), tuple(old), tuple(adv)))
    return out
