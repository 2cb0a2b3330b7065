"""The content executor: extractive (deterministic, bounded) and LLM (prompt, parsing, bound), and the builder hook."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.models.base import SamplingParams
from librarian.models.scripted import ScriptedBackend
from librarian.roles.content_executor import (
    EXECUTOR_KEY,
    ExtractiveExecutor,
    LLMExecutor,
    Source,
    centrality,
    extract,
    parse_content,
)
from librarian.roles.toolbox import TOOLS
from librarian.roles.tools import run_tool

SOURCES = [
    Source("a", "Alice Johnson lives in Dorringham. Hello there. Alice Johnson works as an arborist."),
    Source("b", "Bob Smith lives in Dorringham with Alice Johnson. The weather was nice."),
]


def test_extract_is_deterministic_keeps_every_source_and_prefers_central_sentences():
    text = extract(SOURCES, 140)
    assert text == extract(SOURCES, 140)
    assert len(text) <= 140
    assert text.startswith("a: ") and "\nb: " in text
    assert "arborist" in text  # room for one more sentence: the central one, not the small talk
    assert "weather" not in text and "Hello there" not in text  # the outliers are least central


def test_centrality_ranks_the_shared_sentence_highest():
    scores = centrality(["alice lives in dorringham", "bob lives in dorringham", "a red kite flew"])
    assert scores[2] == 0.0 and scores[0] > 0.0


def test_the_instruction_pulls_matching_sentences_in():
    assert "weather" in extract(SOURCES, 200, instruction="weather nice")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=4), st.integers(20, 400))
def test_extract_never_exceeds_its_bound(texts, bound):
    out = extract([Source(f"s{i}", t) for i, t in enumerate(texts)], bound)
    assert len(out) <= bound


def test_bad_input_is_named():
    for call in (lambda: extract([], 100), lambda: extract(SOURCES, 5)):
        try:
            call()
        except ValueError as exc:
            assert "source" in str(exc) or "max_chars" in str(exc)
        else:
            raise AssertionError("expected ValueError")


def test_parse_content_unwraps_and_bounds():
    assert parse_content("Sure!\n```markdown\nAlice lives in X.\n```", 100) == "Alice lives in X."
    assert parse_content("<content>fact one</content> trailing", 100) == "fact one"
    assert len(parse_content("word " * 100, 50)) <= 50


def test_llm_executor_prompts_with_the_sources_and_bounds_the_reply():
    seen = []

    def policy(messages, tools):
        seen.append(messages[-1]["content"])
        return "<content>" + "Alice Johnson lives in Dorringham. " * 20 + "</content>"

    ex = LLMExecutor(ScriptedBackend(policy), max_chars=100)
    out = ex("people/alice.md", SOURCES, "where people live")
    assert len(out) <= 100 and out.startswith("Alice Johnson")
    assert "[a]" in seen[0] and "[b]" in seen[0] and "people/alice.md" in seen[0] and "where people live" in seen[0]


def test_llm_executor_with_an_empty_reply_falls_back_to_extraction():
    ex = LLMExecutor(ScriptedBackend(lambda m, t: "   "), max_chars=200)
    assert ex("x.md", SOURCES) == extract(SOURCES, 200)


def test_llm_executor_on_a_tiny_model_is_bounded(tiny):
    ex = LLMExecutor(tiny, max_chars=60, params=SamplingParams(max_new_tokens=24, temperature=0.0))
    out = ex("x.md", SOURCES)
    assert 0 < len(out) <= 60


def _call(ctx, key, **args):
    return run_tool(TOOLS[key], ctx, args)


def test_builder_create_file_without_text_uses_the_attached_executor(ctx):
    assert not _call(ctx, "builder.create_file", path="notes/a.md", sources=["f1", "f2"]).ok  # none attached
    ctx.extra[EXECUTOR_KEY] = ExtractiveExecutor(max_chars=300)
    res = _call(ctx, "builder.create_file", path="notes/a.md", sources=["f1", "f2"])
    assert res.ok, res.text
    node = ctx.workspace.by_path("notes/a.md")
    assert "arborist" in node.text and "Dorringham" in node.text and node.provenance == ("f1", "f2")
    assert _call(ctx, "builder.create_file", path="notes/b.md", text="mine", sources=["f3"]).ok
    assert ctx.workspace.by_path("notes/b.md").text == "mine"  # the builder's own text still wins
    res = _call(ctx, "builder.merge_files", children=["notes/a.md", "notes/b.md"], path="notes/all")
    assert res.ok, res.text
    merged = ctx.workspace.by_path("notes/all")
    assert "arborist" in merged.text and "mine" in merged.text
