"""Shared models for the backend tests: a tiny random Llama with SmolLM2's tokenizer (built once)."""

from __future__ import annotations

import os

import pytest

from librarian.models.hf import tiny_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny():
    return tiny_llama(seed=0)
