"""The tool-call grammar: compact schemas, enums, paths, call counts, free text; bitmask unpacking."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.models.base import BackendError
from librarian.models.constrained import (
    ARGUMENT_CAPS,
    MAX_STRING,
    PATH_PATTERN,
    compact_schema,
    compiler_for,
    tool_call_grammar,
    tool_enums,
    unpack_bitmask,
)
from librarian.models.hf import smollm2_tokenizer
from librarian.roles.builder_tools import BUILDER_TOOLS
from librarian.roles.tools import params

TOOLS = [t.schema() for t in BUILDER_TOOLS]
OPEN = {"type": "function", "function": {"name": "open", "parameters": params(
    ["path"], path={"type": "string", "minLength": 1})}}
LISTING = {"type": "function", "function": {"name": "ls", "parameters": params(
    [], path={"type": "string"})}}


def accepts(grammar: str, text: str) -> bool:
    """True when `text` is a complete sentence of the grammar."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(compiler_for(smollm2_tokenizer()).compile(grammar))
    return bool(matcher.accept_string(text)) and matcher.is_completed()


def call(name: str, args: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


def test_compact_schema_drops_optional_text_and_caps_strings_and_arrays():
    create = TOOLS[0]["function"]["parameters"]
    compact = compact_schema(create)
    assert "text" not in compact["properties"] and "text" in create["properties"]  # the original is untouched
    assert compact["properties"]["instruction"]["maxLength"] == 40
    assert compact["properties"]["path"]["pattern"] == PATH_PATTERN
    assert compact["properties"]["sources"]["maxItems"] == 4
    required_text = params(["text"], text={"type": "string"})
    assert "text" in compact_schema(required_text)["properties"]  # a required argument is never dropped


def test_enums_keep_only_values_the_argument_accepts():
    schema = compact_schema(OPEN["function"]["parameters"], enums={"path": ["", "a/b.md", "c"]})
    assert schema["properties"]["path"]["enum"] == ["a/b.md", "c"]  # '' fails minLength 1
    schema = compact_schema(LISTING["function"]["parameters"], enums={"path": ["", "a"]})
    assert schema["properties"]["path"]["enum"] == ["", "a"]


def test_grammar_accepts_valid_calls_and_rejects_others():
    g = tool_call_grammar(TOOLS, enums={"sources": ["facts/d1", "facts/d2"]})
    assert accepts(g, call("create_file", '{"path": "people/a.md", "sources": ["facts/d1"]}'))
    assert accepts(g, call("stop", "{}"))
    assert not accepts(g, call("create_file", '{"path": "people/a.md", "sources": ["facts/zz"]}'))  # not a doc
    assert not accepts(g, call("create_file", '{"path": "has space.md", "sources": ["facts/d1"]}'))
    assert not accepts(g, call("teleport", "{}"))
    assert not accepts(g, "thinking " + call("stop", "{}"))  # no free text unless the role allows it


def test_max_calls_and_free_text():
    g = tool_call_grammar([OPEN], max_calls=2, free_text=True)
    one, two = call("open", '{"path": "a"}'), call("open", '{"path": "b"}')
    assert accepts(g, one) and accepts(g, f"I look at a first. {one}\n{two}")
    assert not accepts(g, f"{one}\n{two}\n{one}")  # three calls
    assert not accepts(g, "x" * 200 + one)  # the thought is short
    with pytest.raises(BackendError, match="max_calls"):
        tool_call_grammar([OPEN], max_calls=0)
    with pytest.raises(BackendError, match="at least one tool"):
        tool_call_grammar([])


def test_a_solo_tool_is_its_turns_only_call():
    """The answer tool (the researcher's finalize) ends the episode: never beside other calls, never twice."""
    g = tool_call_grammar([OPEN, LISTING], max_calls=3, free_text=True, solo=["ls"])
    one, done = call("open", '{"path": "a"}'), call("ls", '{"path": "x"}')
    assert accepts(g, f"Done. {done}") and accepts(g, f"{one}\n{one}\n{one}")
    assert not accepts(g, f"{one}\n{done}") and not accepts(g, f"{done}\n{one}") and not accepts(g, f"{done}\n{done}")
    free = tool_call_grammar([OPEN, LISTING], max_calls=3)
    assert accepts(free, f"{one}\n{done}")  # without `solo` any tool may come with the others
    assert accepts(tool_call_grammar([LISTING], max_calls=3, solo=["ls"]), done)  # only the solo tool offered


def test_unpack_bitmask_matches_bits():
    packed = torch.tensor([[0b101, -1]], dtype=torch.int32)
    bits = unpack_bitmask(packed, 40)
    assert bits.shape == (1, 40)
    assert bits[0, :3].tolist() == [True, False, True] and not bits[0, 3:32].any() and bits[0, 32:].all()


def test_a_tool_named_enum_holds_only_that_tools_argument():
    enums = {"path": ["x"], "open.path": ["a/b.md"], "sources": ["facts/d1"]}
    assert tool_enums(enums, "open") == {"path": ["a/b.md"], "sources": ["facts/d1"]}
    assert tool_enums(enums, "ls") == {"path": ["x"], "sources": ["facts/d1"]}
    assert tool_enums(None, "ls") == {}
    g = tool_call_grammar([OPEN, LISTING], enums={"open.path": ["a/b.md", "c.md"]})
    assert accepts(g, call("open", '{"path": "c.md"}'))
    assert not accepts(g, call("open", '{"path": "elsewhere.md"}'))  # held to the named files
    assert accepts(g, call("ls", '{"path": "elsewhere"}'))  # the other tool's path stays free


def test_grammar_keeps_the_schemas_argument_order():
    """The grammar lays arguments out in the order the schema (and the tool listing) gives them, not sorted:
    a scripted SFT teacher writes them in that order, and its student must be able to write them so too."""
    merge = next(t for t in TOOLS if t["function"]["name"] == "merge_files")
    assert list(merge["function"]["parameters"]["properties"])[:2] == ["path", "children"]
    g = tool_call_grammar(TOOLS)
    assert accepts(g, call("merge_files", '{"path": "index/a", "children": ["x.md", "y.md"]}'))
    assert not accepts(g, call("merge_files", '{"children": ["x.md", "y.md"], "path": "index/a"}'))


def test_a_content_argument_gets_its_own_cap():
    """`context` (the researcher's handover) is capped at ARGUMENT_CAPS, names at MAX_STRING."""
    schema = params(["context", "query"], context={"type": "string"}, query={"type": "string"})
    props = compact_schema(schema)["properties"]
    assert props["context"]["maxLength"] == ARGUMENT_CAPS["context"] > MAX_STRING == props["query"]["maxLength"]
