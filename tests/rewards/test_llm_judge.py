"""The LLM judge: template checks, robust parsing, retries, and a persistent cache."""

import json

import pytest

from librarian.rewards import DEFAULT_TEMPLATE, JudgeCache, JudgeError, LLMJudge, parse_verdict


@pytest.mark.parametrize(("reply", "verdict"), [
    ("The answer matches.\ncorrect: yes", True),
    ("**correct:** no", False),
    ("correct: no\n...on reflection\ncorrect: yes", True),
    ('{"correct": false, "why": "different person"}', False),
    ('Result: {"verdict": "correct"}', True),
    ("so the grade is \\boxed{no}", False),
    ("Reasoning here.\n\n**Verdict: Incorrect**", False),
    ("Yes", True),
    ("I am not sure what to say.", None),
    ("", None),
])
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) is verdict


class Scripted:
    """A judge model that answers from a list of replies and records its prompts."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts = []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        return self.replies.pop(0)


def test_judge_formats_prompt_and_caches():
    model = Scripted(["correct: yes"])
    judge = LLMJudge(model)
    assert judge("Capital of France?", ["Paris"], "It is Paris.") is True
    assert "Capital of France?" in model.prompts[0] and "Paris" in model.prompts[0]
    assert judge("Capital of France?", ["Paris"], "It is Paris.") is True  # from the cache
    assert judge.calls == 1 and len(judge.cache) == 1


def test_alternatives_in_the_reference_and_order_insensitive_cache():
    model = Scripted(["correct: yes"])
    judge = LLMJudge(model, template="Q: {question}\nR: {response}\nGold: {reference}")
    judge("q", ["a", "b"], "a")
    assert "any of: a; b" in model.prompts[0]
    assert judge("q", ["b", "a"], "a") is True and judge.calls == 1


def test_unparsed_reply_is_retried_then_none_and_not_cached():
    model = Scripted(["hmm", "still unsure", "correct: no"])
    judge = LLMJudge(model, retries=1)
    assert judge("q", ["g"], "r") is None
    assert judge.calls == 2 and len(judge.cache) == 0
    assert judge("q", ["g"], "r") is False  # a later call tries again


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_cache_round_trips(tmp_path, suffix):
    judge = LLMJudge(Scripted(["correct: yes", "correct: no"]))
    judge("q1", ["g"], "r1")
    judge("q2", ["g"], "r2")
    path = judge.cache.save(tmp_path / f"cache{suffix}")
    loaded = JudgeCache.load(path)
    fresh = LLMJudge(Scripted([]), cache=loaded)
    assert fresh("q1", ["g"], "r1") is True and fresh("q2", ["g"], "r2") is False and fresh.calls == 0


def test_cache_refuses_another_template(tmp_path):
    judge = LLMJudge(Scripted(["correct: yes"]))
    judge("q", ["g"], "r")
    path = judge.cache.save(tmp_path / "c.json")
    with pytest.raises(JudgeError, match="another judge template"):
        JudgeCache.load(path, template="{response} vs {reference}")
    (tmp_path / "bad.json").write_text(json.dumps({"entries": []}))
    with pytest.raises(JudgeError, match="not a judge cache"):
        JudgeCache.load(tmp_path / "bad.json")
    with pytest.raises(JudgeError, match=".json or .parquet"):
        judge.cache.save(tmp_path / "c.txt")


@pytest.mark.parametrize(("template", "msg"), [
    ("{question} {answer} {reference}", "unknown fields"),
    ("{question} only", "must contain"),
    ("{question", "not a valid format"),
])
def test_bad_templates(template, msg):
    with pytest.raises(JudgeError, match=msg):
        LLMJudge(lambda p: "correct: yes", template=template)


def test_default_template_is_the_official_prompt():
    assert "correct: yes" in DEFAULT_TEMPLATE and "{response}" in DEFAULT_TEMPLATE
    with pytest.raises(JudgeError, match="gold"):
        LLMJudge(lambda p: "correct: yes")("q", [], "r")
