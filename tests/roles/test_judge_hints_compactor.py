"""The judge role, the hint generator (training only) and the compactors."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.models.scripted import ScriptedBackend, first_hit_reader, tool_call_text
from librarian.rewards.llm_judge import LLMJudge, parse_verdict
from librarian.roles import LoopConfig, ToolEnv, kbgym_reader, run_episode
from librarian.roles.backend_judge import BackendJudge, JudgeItem, backend_generate
from librarian.roles.compactor import SUMMARY_HEAD, ExtractiveCompactor, LLMCompactor
from librarian.roles.researcher_hints import (
    HintedEnv,
    HintInput,
    HintSchedule,
    LLMHinter,
    redact,
    scripted_hint,
)


def _grader(messages, tools):
    """A judge program: 'yes' when the reference appears in the response."""
    prompt = messages[-1]["content"]
    ref = prompt.split("Reference answer: ")[1].split("\n")[0]
    resp = prompt.split("Response: ")[1].split("\n")[0]
    return f"The response says {resp}.\ncorrect: {'yes' if ref.lower() in resp.lower() else 'no'}"


def test_backend_judge_grades_a_batch_in_one_generate():
    calls = []
    backend = ScriptedBackend(_grader)
    orig = backend.generate
    backend.generate = lambda convs, tools, params: calls.append(len(convs)) or orig(convs, tools, params)
    judge = BackendJudge(backend)
    items = [JudgeItem("Where?", ("Paris",), "It is Paris."), JudgeItem("Where?", ("Rome",), "It is Paris.")]
    assert judge.judge_many(items) == [True, False]
    assert calls == [2]


def test_unparsed_replies_are_retried_then_none_and_a_lenient_parser_can_be_passed():
    replies = iter(["hmm", "still thinking", "Verdict: **Yes**"])
    judge = BackendJudge(ScriptedBackend(lambda m, t: next(replies)), retries=1)
    assert judge("q", ["a"], "a") is None
    assert len(judge.replies) == 2
    lenient = BackendJudge(ScriptedBackend(lambda m, t: "Verdict: **Yes**"), parse=parse_verdict)
    assert lenient("q", ["a"], "a") is True


def test_backend_generate_drives_the_rewards_llm_judge():
    judge = LLMJudge(backend_generate(ScriptedBackend(_grader)))
    assert judge("Where?", ["Paris"], "Paris") is True
    assert judge("Where?", ["Rome"], "Paris") is False


REF = HintInput("What is Alice Smith's mother's job?", ("baker",), ("session-003", "session-007"),
                ("person:Alice Smith", "relation:mother", "job:baker"))


def test_scripted_hint_nudges_towards_what_is_missing_never_the_answer_or_a_source():
    hint = scripted_hint(REF)
    assert "Alice Smith" in hint and "baker" not in hint.lower() and "session-" not in hint
    later = scripted_hint(_with(REF, "browse session-003: Alice Smith: my mother says hello"))
    assert "mother" in later and "session-" not in later and "baker" not in later.lower()
    assert scripted_hint(_with(REF, "alice smith mother session-003 session-007")) is None


def _with(ref: HintInput, transcript: str) -> HintInput:
    return HintInput(ref.question, ref.answers, ref.evidence, ref.keys, transcript)


_WORDS = st.text(alphabet="abcdefghij ", min_size=0, max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="klmnopq", min_size=1, max_size=10), _WORDS)
def test_redact_removes_every_answer_occurrence(answer, noise):
    out = redact(f"{noise} {answer} + {answer.upper()}. {noise}", [answer])
    assert answer not in out.lower() and out.count("...") == 2


def test_llm_hinter_never_sees_the_sources_and_its_output_is_redacted():
    prompts = []
    hinter = LLMHinter(ScriptedBackend(lambda m, t: prompts.append(m[-1]["content"])
                                       or "The answer is Baker, check session-003 or sessions/session-007."))
    hint = hinter(REF)
    assert hint.startswith("Hint:") and "baker" not in hint.lower() and "session-00" not in hint
    assert prompts and "session-00" not in prompts[0] and "What is Alice Smith's mother's job?" in prompts[0]


def test_hinted_env_adds_hints_only_when_the_training_loop_enables_them(ctx):
    role = kbgym_reader(budget=6)
    searcher = lambda m, t: tool_call_text("search", query="Dorringham", page=1)  # noqa: E731
    off = HintedEnv(ToolEnv(role, ctx, "Question: who lives in Dorringham?"), scripted_hint, REF)
    traj = run_episode(off, ScriptedBackend(searcher), role)
    assert off.hints == [] and not any("Hint:" in t.observation for t in traj.turns)
    on = HintedEnv(ToolEnv(role, ctx, "Question: who lives in Dorringham?"), scripted_hint, REF,
                   HintSchedule(enabled=True, every=2))
    traj = run_episode(on, ScriptedBackend(searcher), role)
    with_hint = [t.index for t in traj.turns if "Hint:" in t.observation]
    assert with_hint == [1, 3, 5] and len(on.hints) == 3


def _history(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"role": "assistant", "content": tool_call_text("read", id=f"f{i}")})
        out.append({"role": "tool", "content": f"[raw] facts/f{i}  id=f{i}\n---\nfact number {i} " + "x" * 300})
    return out


def test_extractive_compactor_keeps_recent_pairs_and_summarises_the_rest_bounded():
    hist = _history(6)
    out = ExtractiveCompactor(keep_pairs=2, max_chars=600)(hist)
    assert len(out) == 5 and out[1:] == hist[-4:]
    summary = out[0]["content"]
    assert summary.startswith(SUMMARY_HEAD) and len(summary) <= 600
    assert '"id": "f3"' in summary and '"id": "f4"' not in summary  # f4, f5 are the kept pairs
    assert "dropped" in summary and '"id": "f0"' not in summary  # the bound drops the oldest first
    again = ExtractiveCompactor(keep_pairs=1, max_chars=2000)(out + _history(1))
    assert again[0]["content"].count(SUMMARY_HEAD) == 1 and '"id": "f3"' in again[0]["content"]


def test_compactor_plugs_into_the_episode_loop(ctx):
    role = kbgym_reader(budget=8, memory_window=None)
    seen = []

    def policy(messages, tools):
        seen.append(messages)
        return first_hit_reader(messages[:2], tools) if len(messages) == 2 else tool_call_text(
            "search", query="Dorringham", page=len(messages) // 2)

    config = LoopConfig(compactor=ExtractiveCompactor(keep_pairs=1), compact_at_chars=600)
    traj = run_episode(ToolEnv(role, ctx, "Question: who lives in Dorringham?"), ScriptedBackend(policy), role, config)
    assert traj.compactions >= 1
    assert any(m[2]["content"].startswith(SUMMARY_HEAD) for m in seen if len(m) > 2)
    assert max(len(m) for m in seen) <= 2 + 1 + 2 + 2  # opening, summary, kept pair, newest pair


def test_llm_compactor_uses_the_backend_and_falls_back_when_empty():
    hist = _history(4)
    out = LLMCompactor(ScriptedBackend(lambda m, t: "Found facts 0-1; still missing the city."), keep_pairs=1)(hist)
    assert out[0]["content"] == f"{SUMMARY_HEAD}\nFound facts 0-1; still missing the city." and out[1:] == hist[-2:]
    empty = LLMCompactor(ScriptedBackend(lambda m, t: ""), keep_pairs=1)(hist)
    assert empty[0]["content"].startswith(SUMMARY_HEAD) and '"id": "f0"' in empty[0]["content"]
