"""`rollout.merge_children: existing`: under the grammar a build can merge only synthetic files that exist."""

from __future__ import annotations

import json
import os
import re

import pytest

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob
from librarian.cluster.builder_worker import BuilderRolloutWorker, synthetic_paths
from librarian.config import ConfigError
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.models.constrained import compiler_for
from librarian.pipelines.builder.corpora import make_corpora
from librarian.rewards.construction import RewardConfig
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder
from librarian.workspace import Workspace
from librarian.workspace.ops import CreateFile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SEED = 5


@pytest.fixture(scope="module")
def corpus():
    kb = build_kbgym(people=60, seed=1, sizes=SplitSizes(train=30, test_in=20, test_out=10, eval_in=5, eval_out=5))
    return make_corpora(kb, 1, questions=2, docs=10, splits=("train",), seed=1, prefix="c")[0]


def merge(children: list[str]) -> str:
    call = {"name": "merge_files", "arguments": {"path": "index/all", "children": children}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def test_the_live_enum_holds_merges_to_the_files_created_so_far(corpus):
    import xgrammar as xgr

    spaces = [Workspace.from_documents(corpus.docs) for _ in range(2)]
    assert synthetic_paths(spaces) == {"merge_files.children": ()}  # nothing created yet: the path pattern holds
    source = corpus.docs[0].path
    spaces[1].apply(CreateFile(path="index/a.md", text="x", sources=(spaces[1].by_path(source).id,)))
    assert synthetic_paths(spaces) == {"merge_files.children": ("index/a.md",)}

    role = librarian_builder(budget=3)
    tools = ToolEnv(role, ToolContext(spaces[0]), "").reset().tools
    worker = BuilderRolloutWorker(BuilderRolloutConfig(options={"model": "tiny"}, constrained=True))
    config = LoopConfig(constrained=True, live_enums=lambda: synthetic_paths(spaces))
    compiled = compiler_for(worker.backend.tokenizer).compile(config.grammar(tools, role))

    def accepts(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(text) and matcher.is_completed()

    assert accepts(merge(["index/a.md"]))
    assert not accepts(merge(["kb00561aridiaumbraleighharmyorax"]))  # a made-up child, as a trained policy wrote
    plain = compiler_for(worker.backend.tokenizer).compile(LoopConfig(constrained=True).grammar(tools, role))
    matcher = xgr.GrammarMatcher(plain)
    assert matcher.accept_string(merge(["kb00561aridiaumbraleighharmyorax"]))  # without it the grammar allows it


def test_sampled_builds_merge_only_files_that_a_build_had_created(corpus):
    """Turn by turn: once any build of the group has written a synthetic file (create_file or merge_files), every
    merge names only files written at earlier turns (before that, the children fall back to the path pattern)."""
    spec = BuilderRolloutConfig(options={"model": "tiny"}, budget=4, max_new_tokens=100, constrained=True,
                                content_executor="extractive", tool_listing="signatures", merge_children="existing")
    worker = BuilderRolloutWorker(spec, RewardConfig(every=1, max_probes=0))
    records = worker.run(BuildJob("m1", corpus.corpus_id, corpus.docs, group_size=4, seed=SEED))
    created_before: set[str] = set()
    checked = 0
    for k in range(max(len(r.trajectory.turns) for r in records)):
        turns = [r.trajectory.turns[k] for r in records if k < len(r.trajectory.turns)]
        calls = [json.loads(m.group(1)) for t in turns for m in re.finditer(r"<tool_call>(.*?)</tool_call>", t.text)]
        if created_before:
            for call in (c for c in calls if c["name"] == "merge_files"):
                assert set(call["arguments"]["children"]) <= created_before, call
                checked += 1
        created_before |= {re.search(r"at '(.*?)'", t.observation).group(1) for t in turns
                           if t.observation.startswith(("created", "merged"))}  # a merge writes a synthetic file
    assert checked  # the seed gives merges after a first file exists


def test_an_unknown_merge_children_setting_is_refused():
    with pytest.raises(ConfigError, match="rollout.merge_children must be one of any, existing, got 'some'"):
        BuilderRolloutConfig(merge_children="some")
