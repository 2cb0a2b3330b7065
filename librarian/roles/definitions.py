"""Roles: a system prompt, a tool set, a budget and a memory window.

The tool set of a role comes from the toolbox (each tool says which roles
get it). Budgets follow the papers: KBGym reader M = N1 = 15 and curator
N2 = 30 (paper 001), the Librarian answerer answers within its budget and is
forced to answer when it runs out (paper 000).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from librarian.roles.researcher_tools import JAM_RESEARCHER
from librarian.roles.toolbox import tool_keys_for
from librarian.roles.tools import KBGYM_CURATOR, KBGYM_READER, LIBRARIAN_ANSWERER, LIBRARIAN_BUILDER


@dataclass(frozen=True, slots=True)
class Role:
    """How an agent is set up. `memory_window=None` keeps the full history (with an optional compaction hook)."""

    name: str
    system_prompt: str
    tools: tuple[str, ...]
    budget: int
    memory_window: int | None = None
    max_calls_per_turn: int = 1
    forced_answer: bool = False
    answer_tool: str = "answer"
    stop: tuple[str, ...] = ("</tool_call>",)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"role {self.name!r}: budget must be at least 1 action, got {self.budget}")
        if self.memory_window is not None and self.memory_window < 0:
            raise ValueError(f"role {self.name!r}: memory_window must be >= 0 or None, got {self.memory_window}")
        if self.max_calls_per_turn < 1:
            raise ValueError(f"role {self.name!r}: max_calls_per_turn must be >= 1, got {self.max_calls_per_turn}")

    def with_(self, **changes: object) -> Role:
        """A copy with some fields changed (budget, window, prompt...)."""
        return replace(self, **changes)  # type: ignore[arg-type]


CALL_FORMAT = ("Act by calling exactly one tool per message, written as "
               '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>. '
               "Every call costs one action, including a malformed one.")

KBGYM_READER_PROMPT = (
    "You answer questions about a fictional world from a knowledge base of short documents. "
    "Nothing you know from elsewhere is true here: use only what you read. "
    "search(query, page) returns five documents per page; read(id) shows a document and every document it "
    "links to. When you know the answer, call answer(text) with the answer alone (a name, a number, or names "
    "separated by commas). You have {budget} actions; you answer once. " + CALL_FORMAT
)
KBGYM_CURATOR_PROMPT = (
    "You curate a knowledge base of short documents so that a future reader answers questions with fewer "
    "actions. You are shown a question, how it was answered, and the gold answer. Name the keys the question "
    "mentioned (people, places, jobs, hobbies, relations) and make sure each has a complete index document: "
    "build what is missing, extend what is partial, change nothing if it is already complete. An index points; "
    "it does not list: its members belong in its links, never recited in its sentence. One key at a time; "
    "precision before completeness. Tools: search, read, add, edit, delete, link, link_many (up to 40 targets), "
    "unlink, and done when finished. You have {budget} actions. " + CALL_FORMAT
)
LIBRARIAN_ANSWERER_PROMPT = (
    "You answer a question from a workspace of files. list(path) shows a folder; read(path, start_line, "
    "num_lines) shows a file or part of it. Reading costs actions and tokens, so go straight to what you need. "
    "Call answer(text) with the answer alone. You have {budget} actions; when they run out you must answer. "
    + CALL_FORMAT
)
LIBRARIAN_BUILDER_PROMPT = (
    "You organise a workspace of raw documents before questions arrive, so that a reader with a small budget "
    "finds answers quickly. create_file(path, text, sources) writes a file that consolidates source documents; "
    "merge_files(children, path, text) writes a summary that links files and nests them under it; delete(path) "
    "removes a synthetic file (raw documents stay); list and read inspect the workspace. Call stop() when the "
    "workspace is ready. You have {budget} actions. " + CALL_FORMAT
)

JAM_RESEARCHER_PROMPT = (
    "You research a request in a memory workspace of past sessions before a client agent answers it. "
    "open(path) shows a folder's README and entries; search(query, page) is hybrid search, five hits a page; "
    "browse(path, query) shows a file's lines relevant to the query and its sources. Each round: think about "
    "what is still missing, make up to {calls} calls, then reflect whether the evidence is sufficient. When it "
    "is, or when you have no rounds left, call finalize(context, sources) with the relevant facts and the "
    "paths they come from. You have {budget} rounds. Write each call as "
    '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>.'
)


def _role(name: str, prompt: str, budget: int, **kw: object) -> Role:
    return Role(name, prompt.replace("{budget}", str(budget)), tool_keys_for(name), budget, **kw)  # type: ignore[arg-type]


def kbgym_reader(budget: int = 15, memory_window: int = 5) -> Role:
    """Paper 001's reader: search / read / answer, budget M, memory of the last k action-result pairs."""
    return _role(KBGYM_READER, KBGYM_READER_PROMPT, budget, memory_window=memory_window)


def kbgym_curator(budget: int = 30, memory_window: int | None = None) -> Role:
    """Paper 001's curator (backward pass): search / read and the editing tools, ending with done."""
    return _role(KBGYM_CURATOR, KBGYM_CURATOR_PROMPT, budget, memory_window=memory_window, answer_tool="done")


def librarian_answerer(budget: int = 10, memory_window: int | None = None) -> Role:
    """Paper 000's answerer: list / read with line ranges / answer; forced to answer when the budget runs out."""
    return _role(LIBRARIAN_ANSWERER, LIBRARIAN_ANSWERER_PROMPT, budget, memory_window=memory_window,
                 forced_answer=True)


def librarian_builder(budget: int = 40, memory_window: int | None = None) -> Role:
    """Paper 000's builder: create_file / merge_files / delete / stop, plus list / read; full history."""
    return _role(LIBRARIAN_BUILDER, LIBRARIAN_BUILDER_PROMPT, budget, memory_window=memory_window,
                 answer_tool="stop")


def jam_researcher(budget: int = 20, max_calls_per_turn: int = 4, memory_window: int | None = None) -> Role:
    """Paper 002's researcher: open / search / browse, several calls a round, finalize; budget in rounds.

    Run it through `researcher.ResearchEnv`, which counts one action per
    round (message); out of rounds it is forced to finalize.
    """
    prompt = JAM_RESEARCHER_PROMPT.replace("{calls}", str(max_calls_per_turn))
    return _role(JAM_RESEARCHER, prompt, budget, memory_window=memory_window, max_calls_per_turn=max_calls_per_turn,
                 forced_answer=True, answer_tool="finalize", stop=())


ROLES = {KBGYM_READER: kbgym_reader, KBGYM_CURATOR: kbgym_curator, LIBRARIAN_ANSWERER: librarian_answerer,
         LIBRARIAN_BUILDER: librarian_builder, JAM_RESEARCHER: jam_researcher}
