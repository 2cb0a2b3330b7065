"""Schema-constrained tool calls: a grammar from a role's tool schemas, compiled by xgrammar.

`tool_call_grammar(tools)` turns OpenAI-format tool schemas into one EBNF
grammar (xgrammar's dialect, which vLLM's structured outputs also accept):
optional free text (where the role allows it), then 1..`max_calls` blocks
`<tool_call>{"name": <one of the tools>, "arguments": <that tool's JSON
schema>}</tool_call>`, or one call of a `solo` tool (a role's answer tool,
which ends the episode) and nothing else. The sample then has to end (the end-of-turn token is
the grammar's stop token). Every call sampled under it parses.

The compact layout keeps turns short: optional `text` arguments are left out
(the content executor writes file text from the sources), strings are capped
at `max_string` characters and arrays at `max_items` items.

Log-probs under a grammar are those of the *constrained* distribution:
the softmax over the tokens the grammar allows at each step. `replay_bitmask`
recomputes those allowed sets for a sampled token sequence, packed as
xgrammar's int32 bitmask (`replay_masks` unpacked; the grammar is
deterministic given the tokens), so the learner renormalises its log-probs
under exactly the masks the sampler used. xgrammar does the grammar work;
nothing here parses grammars by hand.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from librarian.models.base import BackendError, ToolSchema
from librarian.models.chat import END_OF_TURN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

MAX_STRING = 40
MAX_ITEMS = 4
OMIT_OPTIONAL = ("text",)
PATH_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,47}$"  # what a path argument may look like under a grammar
PATH_KEYS = ("path", "sources", "children", "target", "targets")
FREE_TEXT_CHARS = 160  # a short thought; longer ones eat the token budget before the calls
ARGUMENT_CAPS = {"context": 160}  # string arguments that carry content, not a name: a longer cap than MAX_STRING
# (the researcher's `finalize.context` hands its findings over in one or two sentences)


def _xgr() -> Any:
    try:
        import xgrammar
    except ImportError as exc:  # pragma: no cover - installed by `make setup`
        raise BackendError("constrained decoding needs xgrammar: run `make setup` "
                           "(pip install --no-deps xgrammar==0.2.8 apache-tvm-ffi)") from exc
    return xgrammar


def compact_schema(schema: dict[str, Any], max_string: int = MAX_STRING, max_items: int = MAX_ITEMS,
                   omit: Sequence[str] = OMIT_OPTIONAL, enums: Mapping[str, Sequence[str]] | None = None,
                   caps: Mapping[str, int] = ARGUMENT_CAPS) -> dict[str, Any]:
    """A copy of a JSON schema with optional `omit` properties dropped, strings/arrays capped (`max_string`,
    or `caps[name]` for the string properties it names), path-like properties (`PATH_KEYS`) held to
    `PATH_PATTERN`, and properties named in `enums` held to those values."""
    out = copy.deepcopy(schema)
    enums = enums or {}

    def restrict(name: str, node: Any) -> None:
        leaf = node.get("items") if isinstance(node, dict) and node.get("type") == "array" else node
        if not isinstance(leaf, dict) or leaf.get("type") != "string":
            return
        allowed = [v for v in dict.fromkeys(enums.get(name) or ()) if len(v) >= int(leaf.get("minLength", 0))]
        if allowed:  # only values the argument's own schema accepts (e.g. no '' where minLength is 1)
            leaf.clear()
            leaf.update({"type": "string", "enum": allowed})
        elif name in PATH_KEYS:
            leaf.pop("minLength", None)
            leaf["pattern"] = PATH_PATTERN

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "string" and not {"enum", "const", "pattern"} & set(node):
            node["maxLength"] = min(int(node.get("maxLength", max_string)), max_string)
        if node.get("type") == "array":
            node["maxItems"] = min(int(node.get("maxItems", max_items)), max_items)
        props = node.get("properties")
        if isinstance(props, dict):
            required = set(node.get("required", []))
            for name in [p for p in props if p in omit and p not in required]:
                del props[name]
            node.setdefault("additionalProperties", False)
            for name, child in props.items():
                restrict(name, child)
                walk(child)
                if name in caps and isinstance(child, dict) and child.get("type") == "string" and "maxLength" in child:
                    child["maxLength"] = int(caps[name])
        for key in ("items", "anyOf", "oneOf", "allOf"):
            child = node.get(key)
            for c in child if isinstance(child, list) else [child]:
                walk(c)
        node.pop("description", None)

    walk(out)
    return out


def tool_enums(enums: Mapping[str, Sequence[str]] | None, tool: str) -> dict[str, Sequence[str]]:
    """The enums that hold `tool`'s arguments: the shared ones (`sources`), overridden by `tool.argument`."""
    enums = enums or {}
    out = {k: v for k, v in enums.items() if "." not in k}
    out.update({k.split(".", 1)[1]: v for k, v in enums.items() if k.startswith(f"{tool}.")})
    return out


def call_schema(tools: Sequence[ToolSchema], compact: bool = True,
                enums: Mapping[str, Sequence[str]] | None = None, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The JSON schema of one call: {"name": const, "arguments": that tool's schema}, any of the tools.

    `enums` keys name an argument of every tool (`sources`) or of one tool (`list.path`); a tool's own
    key wins over the shared one. `max_items` caps the compact layout's arrays."""
    if not tools:
        raise BackendError("a tool-call grammar needs at least one tool")
    cases = []
    for tool in tools:
        fn = tool["function"]
        args = fn.get("parameters") or {"type": "object", "properties": {}}
        args = compact_schema(args, max_items=max_items, enums=tool_enums(enums, fn["name"])) if compact \
            else copy.deepcopy(args)
        args.setdefault("properties", {})
        args.setdefault("additionalProperties", False)
        cases.append({"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": args},
                      "required": ["name", "arguments"], "additionalProperties": False})
    return cases[0] if len(cases) == 1 else {"anyOf": cases}


def _literal(text: str) -> str:
    return json.dumps(text)  # an EBNF string literal: same escapes as JSON for these ASCII tags


def _calls(xgr: Any, tools: list, max_calls: int, compact: bool, enums: dict, max_items: int) -> Any:
    """1..max_calls `<tool_call>` blocks of any of `tools`, each after a newline but the first."""
    schema = call_schema(tools, compact, enums, max_items)
    call = xgr.Grammar.concat(
        xgr.Grammar.from_ebnf(f"root ::= {_literal(TOOL_CALL_OPEN)}"),
        xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False),
        xgr.Grammar.from_ebnf(f"root ::= {_literal(TOOL_CALL_CLOSE)}"))
    if max_calls == 1:
        return call
    empty = xgr.Grammar.from_ebnf('root ::= ""')
    rest = empty  # the optional 2nd..max_calls-th calls, each after a newline, each needing the one before
    for _ in range(max_calls - 1):
        rest = xgr.Grammar.union(xgr.Grammar.concat(xgr.Grammar.from_ebnf('root ::= "\\n"'), call, rest), empty)
    return xgr.Grammar.concat(call, rest)


@functools.lru_cache(maxsize=256)
def _grammar(tools_json: str, max_calls: int, free_text: bool, compact: bool, enums_json: str,
             solo_json: str = "[]", max_items: int = MAX_ITEMS) -> str:
    xgr = _xgr()
    tools, enums, solo = json.loads(tools_json), json.loads(enums_json), set(json.loads(solo_json))
    alone = [t for t in tools if t["function"]["name"] in solo]
    others = [t for t in tools if t["function"]["name"] not in solo]
    if max_calls == 1 or not alone or not others:
        calls = _calls(xgr, tools, max_calls, compact, enums, max_items)
    else:  # a solo tool (the researcher's finalize) is a turn's only call; the others come 1..max_calls a turn
        calls = xgr.Grammar.union(_calls(xgr, alone, 1, compact, enums, max_items),
                                  _calls(xgr, others, max_calls, compact, enums, max_items))
    if free_text:  # a short thought before the calls, with no '<' so it cannot open a malformed tag
        calls = xgr.Grammar.concat(xgr.Grammar.from_ebnf(f"root ::= [^<]{{0,{FREE_TEXT_CHARS}}}"), calls)
    return str(calls)


def tool_call_grammar(tools: Sequence[ToolSchema], max_calls: int = 1, free_text: bool = False,
                      compact: bool = True, enums: Mapping[str, Sequence[str]] | None = None,
                      solo: Sequence[str] = (), max_items: int = MAX_ITEMS) -> str:
    """The EBNF grammar of an assistant turn that calls `tools` (see the module docstring); `enums` holds
    named arguments (e.g. `sources`) to a fixed set of values, such as the paths that exist; a tool named in
    `solo` (a role's answer tool) can only be a turn's one call; `max_items` caps the compact layout's arrays
    (sources, children)."""
    if max_calls < 1:
        raise BackendError(f"max_calls must be >= 1, got {max_calls}")
    if max_items < 1:
        raise BackendError(f"max_items must be >= 1, got {max_items}")
    enums_json = json.dumps({k: list(v) for k, v in sorted((enums or {}).items())})
    # not sort_keys: a JSON-schema grammar lays the arguments out in the order their schema lists them, which
    # is the order the tool listing shows and a scripted teacher writes them in
    return _grammar(json.dumps(list(tools)), int(max_calls), bool(free_text), bool(compact), enums_json,
                    json.dumps(sorted(solo)), int(max_items))


class GrammarCompiler:
    """Compiles grammars against one tokenizer (cached by grammar text); thread-safe."""

    def __init__(self, tokenizer: Any, vocab_size: int | None = None) -> None:
        xgr = _xgr()
        end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
        stops = [end] if isinstance(end, int) and end >= 0 else None
        size = int(vocab_size or len(tokenizer))
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=size, stop_token_ids=stops)
        self.vocab_size = size
        self._compiler = xgr.GrammarCompiler(self.info)
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def compile(self, grammar: str) -> Any:
        with self._lock:
            if grammar not in self._cache:
                try:
                    self._cache[grammar] = self._compiler.compile_grammar(grammar)
                except Exception as exc:  # xgrammar raises RuntimeError subclasses with the EBNF error
                    raise BackendError(f"the tool-call grammar does not compile: {exc}") from exc
            return self._cache[grammar]

    def logits_processor(self, grammar: str) -> Any:
        """A fresh transformers logits processor for one `generate` call (one matcher per row)."""
        from xgrammar.contrib.hf import LogitsProcessor

        return LogitsProcessor(self.compile(grammar))

    def replay_bitmask(self, grammar: str, token_ids: Sequence[int]) -> Any:
        """xgrammar's packed int32 bitmask (len(token_ids), ceil(vocab / 32)): bit i of word j of row r says
        whether token 32 j + i was allowed when token r was sampled (1/8 of the bytes of `replay_masks`).

        Raises `BackendError` when a token was not allowed (the tokens were not sampled under this grammar).
        """
        xgr = _xgr()
        matcher = xgr.GrammarMatcher(self.compile(grammar))
        bitmask = xgr.allocate_token_bitmask(max(1, len(token_ids)), self.vocab_size)
        for i, tok in enumerate(token_ids):
            if matcher.is_terminated():
                raise BackendError(f"token {i} ({tok}) comes after the grammar has terminated")
            matcher.fill_next_token_bitmask(bitmask, i)
            if not matcher.accept_token(int(tok)):
                raise BackendError(f"token {i} ({tok}) is not allowed by the grammar at that point")
        return bitmask[: len(token_ids)]

    def replay_masks(self, grammar: str, token_ids: Sequence[int]) -> Any:
        """Bool tensor (len(token_ids), vocab): row i = the tokens the grammar allowed when token i was sampled."""
        return unpack_bitmask(self.replay_bitmask(grammar, token_ids), self.vocab_size)


def unpack_bitmask(bitmask: Any, vocab_size: int) -> Any:
    """xgrammar's packed int32 bitmask (rows, ceil(V/32)) as a bool tensor (rows, V), on the bitmask's device."""
    import torch

    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


_COMPILERS: dict[int, GrammarCompiler] = {}


def compiler_for(tokenizer: Any, vocab_size: int | None = None) -> GrammarCompiler:
    """One `GrammarCompiler` per tokenizer object (and vocabulary size) in this process."""
    key = hash((id(tokenizer), vocab_size))
    if key not in _COMPILERS:
        _COMPILERS[key] = GrammarCompiler(tokenizer, vocab_size)
    return _COMPILERS[key]
