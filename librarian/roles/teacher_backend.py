"""`TeacherBackend`: a scripted policy whose turns a model backend tokenizes, so SFT can train on them."""

from __future__ import annotations

from typing import Any

from librarian.models import make_backend
from librarian.models.base import Sample


class TeacherBackend:
    """A scripted policy whose messages are tokenized by a model backend, so they can be trained on (SFT)."""

    def __init__(self, policy: str, tokenizer_backend: Any) -> None:
        self.scripted = make_backend("scripted", policy=policy)
        self.tok = tokenizer_backend
        self.name = f"teacher:{policy}"
        self.honours_grammar = False  # its text is the program's, not sampled under a grammar

    def render_prompt(self, messages: Any, tools: Any = None) -> str:
        return self.tok.render_prompt(messages, tools)

    def generate(self, conversations: Any, tools: Any, params: Any) -> list:
        out = []
        for conv, row in zip(conversations, self.scripted.generate(conversations, tools, params), strict=True):
            text = row[0].text
            ids = tuple(self.tok.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append([Sample(text=text, token_ids=ids, logprobs=(0.0,) * len(ids),
                               prompt_token_ids=tuple(self.tok.encode_prompt(conv, tools)))] * params.n)
        return out
