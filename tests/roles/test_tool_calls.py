"""Parsing model output into tool calls: every malformed input becomes a typed error, nothing raises."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from librarian.roles import ToolCallParser, get_tools, kbgym_curator, kbgym_reader
from librarian.roles.tool_calls import ERROR_KINDS
from librarian.roles.toolbox import schemas

READER = ToolCallParser(schemas(get_tools(kbgym_reader().tools)))
CURATOR = ToolCallParser(schemas(get_tools(kbgym_curator().tools)), max_calls=3)


def call(name, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def kinds(parsed):
    return [e.kind for e in parsed.errors]


def test_a_valid_call_with_surrounding_text():
    parsed = READER.parse("I will search.\n" + call("search", query="Alice", page=2))
    assert [(c.name, c.arguments) for c in parsed.calls] == [("search", {"query": "Alice", "page": 2})]
    assert parsed.errors == () and parsed.content == "I will search."


@pytest.mark.parametrize("text,kind,words", [
    ("I think the answer is 4.", "no_call", "no tool call"),
    ("<tool_call>{'name': 'search'}</tool_call>", "bad_json", "not valid JSON"),
    ("<tool_call>[1, 2]</tool_call>", "bad_call", "JSON object"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}, "id": 3}</tool_call>', "bad_call", "unexpected key"),
    ('<tool_call>{"name": "search", "arguments": [1]}</tool_call>', "bad_call", "must be a JSON object"),
    (call("add", text="x"), "unknown_tool", "unknown tool 'add'; the tools are: search, read, answer"),
    (call("search"), "bad_arguments", "'query' is a required property"),
    (call("search", query="x", page=0), "bad_arguments", "minimum"),
    (call("search", query="x", limit=9), "bad_arguments", "'limit' was unexpected"),
    (call("read", id=7), "bad_arguments", "7 is not of type 'string'"),
    (call("search", query="a") + call("answer", text="b"), "too_many_calls", "2 tool calls"),
    ('<tool_call>{"name": "search", "arguments": "{not json"}</tool_call>', "bad_json", "not JSON"),
])
def test_each_malformation_is_one_typed_error(text, kind, words):
    parsed = READER.parse(text)
    assert parsed.calls == () and kinds(parsed) == [kind]
    assert words in parsed.errors[0].message


def test_lenient_forms_are_accepted():
    fenced = '<tool_call>\n```json\n{"name": "answer", "arguments": {"text": "x"}}\n```\n</tool_call>'
    as_string = '<tool_call>{"name": "read", "arguments": "{\\"id\\": \\"f1\\"}"}</tool_call>'
    unclosed = '<tool_call>{"name": "answer", "arguments": {"text": "y"}}'
    assert [c.arguments for t in (fenced, as_string, unclosed) for c in READER.parse(t).calls] == [
        {"text": "x"}, {"id": "f1"}, {"text": "y"}]


def test_several_calls_where_several_are_allowed_keep_their_order():
    text = call("search", query="a") + "junk<tool_call>nope</tool_call>" + call("done")
    parsed = CURATOR.parse(text)
    assert [c.name if hasattr(c, "arguments") else c.kind for c in parsed.items] == ["search", "bad_json", "done"]
    assert kinds(CURATOR.parse(call("done") * 4)) == ["too_many_calls"]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300) | st.builds(lambda a, b: f"{a}<tool_call>{b}</tool_call>", st.text(max_size=40),
                                         st.text(max_size=200)))
def test_fuzz_arbitrary_text_never_raises_and_always_yields_something(text):
    parsed = READER.parse(text)
    assert parsed.calls or parsed.errors
    assert len(parsed.calls) + len(parsed.errors) <= 1
    assert all(e.kind in ERROR_KINDS and e.observation().startswith(f"error ({e.kind}): ") for e in parsed.errors)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=300)
@given(st.sampled_from(["search", "read", "answer", "add", "x"]), st.dictionaries(
    st.sampled_from(["query", "page", "id", "text", "links", "zzz"]), _JSON, max_size=3))
def test_fuzz_json_calls_either_validate_or_explain(name, arguments):
    parsed = READER.parse(call(name, **arguments))
    if parsed.calls:
        (c,) = parsed.calls
        assert c.name == name and c.arguments == arguments and name in ("search", "read", "answer")
    else:
        (e,) = parsed.errors
        assert e.kind in ("unknown_tool", "bad_arguments") and (e.kind == "unknown_tool") == (
            name not in ("search", "read", "answer"))


@given(st.text(min_size=1, max_size=50), st.integers(min_value=1, max_value=10**6))
def test_fuzz_valid_search_calls_round_trip(query, page):
    (c,) = READER.parse(call("search", query=query, page=page)).calls
    assert c.arguments == {"query": query, "page": page}


def test_non_string_input_is_an_error_not_a_crash():
    assert kinds(READER.parse(None)) == ["no_call"]
    assert kinds(READER.parse("<tool_call>" + "[" * 50_000 + "</tool_call>")) == ["bad_json"]
