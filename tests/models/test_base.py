"""The backend contract: sampling parameters, stop handling, the registry, lazy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from librarian.models import BACKENDS, BackendError, SamplingParams, make_backend
from librarian.models.base import check_conversations, cut_at_stop


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"max_new_tokens": 0}, {"temperature": -1}, {"top_p": 0},
                                    {"top_p": 1.5}, {"stop": "x"}, {"stop": ("",)}, {"seed": 1.5}])
def test_sampling_params_reject_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SamplingParams(**kwargs)


def test_greedy_is_temperature_zero():
    assert SamplingParams(temperature=0).greedy and not SamplingParams(temperature=0.5).greedy


@given(st.text(max_size=60), st.lists(st.text(min_size=1, max_size=4), max_size=3))
def test_cut_at_stop_keeps_the_earliest_stop(text, stops):
    cut, hit = cut_at_stop(text, stops)
    assert text.startswith(cut)
    if hit is None:
        assert cut == text and not any(s in text for s in stops)
    else:
        assert cut.endswith(hit)
        # no stop string ends earlier inside the kept text
        assert not any(s in cut[:-1] for s in stops)


def test_check_conversations_names_the_bad_message():
    with pytest.raises(ValueError, match="conversation 0, message 1"):
        check_conversations([[{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]])
    with pytest.raises(ValueError, match="non-empty"):
        check_conversations([[]])


def test_registry_names_and_errors():
    assert set(BACKENDS) == {"hf", "openai", "scripted", "vllm"}
    with pytest.raises(BackendError, match="'tiny', 'smollm2' or a folder with config.json"):
        make_backend("vllm", model="/nonexistent/model")
    with pytest.raises(BackendError, match="unknown policy backend 'llama'"):
        make_backend("llama")
    assert make_backend("scripted").name == "scripted:kbgym_first_hit"


def test_importing_the_package_does_not_load_torch():
    code = ("import sys, librarian, librarian.models, librarian.roles; "
            "from librarian.models import make_backend; make_backend('scripted'); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
