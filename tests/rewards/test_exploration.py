"""The exploration judge of verified SFT: rules as properties, the answer check, and the model judge."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from librarian.rewards.exploration import (
    LLMExplorationJudge,
    answer_in_context,
    judge_exploration,
    render_exploration,
)

PATHS = st.sampled_from(["sessions/s1", "sessions/s2", "memory/a", "memory/a/s1.md", "memory/b"])


def _call(name: str, path: str) -> dict:
    args = {"query": path} if name == "search" else {"path": path, "query": "q"} if name == "browse" else {"path": path}
    return {"name": name, "arguments": args}


CALLS = st.lists(st.builds(_call, st.sampled_from(["search", "open", "browse"]), PATHS), max_size=8)


def test_a_sound_exploration_is_accepted_and_shortcuts_are_not():
    calls = [_call("search", "who"), _call("browse", "sessions/s1"), {"name": "finalize", "arguments": {}}]
    assert judge_exploration(calls, "Ann: lives in Oslo", ["sessions/s1"]).accepted
    only_browse = [_call("browse", "sessions/s1")]
    v = judge_exploration(only_browse, "Ann: lives in Oslo", ["sessions/s1"])
    assert not v.accepted and "no search or open" in v.reasons[0]
    v = judge_exploration(calls, "Ann", ["sessions/s2"])
    assert not v.accepted and v.uninspected == ("sessions/s2",)
    assert not judge_exploration(calls, "  ", ["sessions/s1"]).accepted


def test_calls_after_finalize_do_not_count():
    calls = [_call("search", "x"), {"name": "finalize", "arguments": {}}, _call("browse", "sessions/s1")]
    assert not judge_exploration(calls, "ctx", ["sessions/s1"]).accepted


def test_canonical_equates_ids_and_paths():
    calls = [_call("open", ""), _call("browse", "sessions/s1")]
    ids = {"sessions/s1": "s1", "s1": "s1"}
    assert not judge_exploration(calls, "ctx", ["s1"]).accepted
    assert judge_exploration(calls, "ctx", ["s1"], canonical=lambda r: ids.get(r.strip("/"), r)).accepted


@given(CALLS, st.lists(PATHS, max_size=4), st.text(max_size=20))
def test_accepted_means_every_cited_source_was_inspected(calls, cited, context):
    v = judge_exploration(calls, context, cited)
    inspected = {c["arguments"]["path"] for c in calls if c["name"] in ("open", "browse")}
    assert v.accepted == (bool(context.strip()) and set(cited) <= inspected
                          and any(c["name"] in ("search", "open") for c in calls))
    assert v.accepted == (not v.reasons)


@given(CALLS, st.lists(PATHS, max_size=4), PATHS)
def test_inspecting_more_never_turns_accept_into_reject(calls, cited, extra):
    before = judge_exploration(calls, "ctx", cited)
    after = judge_exploration(calls + [_call("browse", extra)], "ctx", cited)
    assert after.accepted or not before.accepted
    assert set(after.uninspected) <= set(before.uninspected)


@given(CALLS, st.lists(PATHS, max_size=4))
def test_citing_nothing_needs_only_exploration(calls, cited):
    v = judge_exploration(calls, "ctx", [])
    assert v.accepted == any(c["name"] in ("search", "open") for c in calls)


@given(st.lists(st.text(alphabet="abc xyz", min_size=1, max_size=6), min_size=1, max_size=3))
def test_answers_written_into_the_context_are_found(answers):
    golds = [a for a in answers if a.strip()]
    context = "facts: " + " ; ".join(a.upper() for a in golds)
    assert answer_in_context(context, golds) == bool(golds)


def test_answer_check_needs_every_answer_as_a_whole_word():
    assert answer_in_context("Ann moved to Oslo and then Bergen", ["oslo", "Bergen"])
    assert not answer_in_context("Ann moved to Oslo", ["Oslo", "Bergen"])
    assert not answer_in_context("Osloville", ["Oslo"])
    assert not answer_in_context("anything", [])


def test_llm_judge_is_gated_by_the_rules_and_parses_the_verdict():
    prompts: list[str] = []

    def says(verdict):
        def generate(prompt):
            prompts.append(prompt)
            return f"looks fine\ncorrect: {verdict}"
        return generate

    calls = [_call("search", "Ann"), _call("browse", "sessions/s1")]
    assert LLMExplorationJudge(says("yes"))("Where?", calls, "Ann: Oslo", ["sessions/s1"], ["s1"]).accepted
    assert "browse" in prompts[-1] and "Where?" in prompts[-1]
    rejected = LLMExplorationJudge(says("no"))("Where?", calls, "Ann: Oslo", ["sessions/s1"], ["s1"])
    assert not rejected.accepted and "model judge" in rejected.reasons[0]
    n = len(prompts)
    assert not LLMExplorationJudge(says("yes"))("Where?", calls[1:], "x", ["sessions/s1"], ["s1"]).accepted
    assert len(prompts) == n  # the rules rejected it first: no model call
    assert "Cited: sessions/s1" in render_exploration(calls, "ctx", ["sessions/s1"])
