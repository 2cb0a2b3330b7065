"""One job over several corpora: every corpus's builds in one episode batch, each under the grammar of its own
paths (per-prompt grammars), records corpus by corpus, and one GRPO group a corpus."""

from __future__ import annotations

import os

import pytest

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob
from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.models import make_backend
from librarian.models.base import SamplingParams
from librarian.pipelines.builder.corpora import make_corpora
from librarian.rewards.construction import RewardConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def corpora():
    kb = build_kbgym(people=60, seed=1, sizes=SplitSizes(train=30, test_in=20, test_out=10, eval_in=5, eval_out=5))
    return make_corpora(kb, 3, questions=1, docs=8, splits=("train",), seed=1, prefix="c", path_style="top")


@pytest.fixture(scope="module")
def records(corpora):
    spec = BuilderRolloutConfig(options={"model": "tiny"}, budget=2, max_new_tokens=48, constrained=True,
                                content_executor="extractive", tool_listing="signatures", max_items=3)
    worker = BuilderRolloutWorker(spec, RewardConfig(every=1, max_probes=1))
    job = BuildJob("exam", "", [], group_size=2, seed=7, corpora=[(c.corpus_id, c.docs) for c in corpora])
    return worker.run(job)


def test_records_come_back_corpus_by_corpus_each_group_in_build_order(records, corpora):
    assert [(r.corpus_id, r.index) for r in records] == [(c.corpus_id, i) for c in corpora for i in range(2)]
    assert len({r.group for r in records}) == 3 and all(r.job_id == "exam" for r in records)


def in_grammar(path: str, grammar: str) -> bool:
    return path.replace("'", "\\'") in grammar  # the EBNF escapes quotes


def test_each_build_is_sampled_under_its_own_corpuss_grammar(records, corpora):
    paths = {c.corpus_id: {d.path for d in c.docs} for c in corpora}
    for r in records:
        others = set().union(*(p for cid, p in paths.items() if cid != r.corpus_id))
        for turn in r.trajectory.turns:
            assert turn.grammar, "every policy turn was constrained"
            assert all(in_grammar(p, turn.grammar) for p in paths[r.corpus_id])
            assert not any(in_grammar(p, turn.grammar) for p in others - paths[r.corpus_id])
            for call in turn.calls:  # what the policy could name: its own corpus's documents only
                assert set(call["arguments"].get("sources", ())) <= paths[r.corpus_id]


def test_per_prompt_grammars_decode_each_prompt_under_its_own_and_refuse_a_mismatch():
    backend = make_backend("hf", model="tiny")
    prompts = [[{"role": "user", "content": f"say {w}"}] for w in ("a", "b", "c")]
    grammars = ('root ::= "x"', 'root ::= "y"', 'root ::= "x"')
    out = backend.generate(prompts, None, SamplingParams(max_new_tokens=4, temperature=0.0, grammars=grammars))
    assert [row[0].text for row in out] == ["x", "y", "x"]
    with pytest.raises(ValueError, match="3 grammars for 2 prompts"):
        backend.generate(prompts[:2], None, SamplingParams(max_new_tokens=4, temperature=0.0, grammars=grammars))
    with pytest.raises(ValueError, match="not both"):
        SamplingParams(grammar='root ::= "x"', grammars=grammars)
