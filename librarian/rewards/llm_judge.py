"""An LLM-judge scorer: any `(prompt) -> text` callable, a prompt template, robust verdict parsing, a cache.

The judge model is injected (the policy backends of `librarian.models` or a
test stub), so this module imports no model code. Verdicts are cached by
(question, gold answers, response); the cache persists to a JSON or Parquet
file that records the template's hash, and refuses to load under another
template (a changed prompt invalidates every verdict).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from librarian.datasets.scoring import judge_prompt, parse_judge

Generate = Callable[[str], str]
TEMPLATE_FIELDS = ("question", "response", "reference")
DEFAULT_TEMPLATE = judge_prompt("{question}", "{response}", "{reference}")


class JudgeError(ValueError):
    """A judge template, cache file or reply was unusable; the message names it."""


_JSON_OBJ = re.compile(r"\{[^{}]*\}", re.DOTALL)
_YES = {"yes", "correct", "true", "right", "1"}
_NO = {"no", "incorrect", "false", "wrong", "0"}
_LAST_LINE = re.compile(
    r"^\W*(?:final\s+)?(?:verdict|judg(?:e)?ment|grade|answer|result|correct)?\W*(yes|no|correct|incorrect|true|false)\W*$",
    re.IGNORECASE,
)
_BOXED = re.compile(r"\\boxed\{\s*(yes|no|correct|incorrect)\s*\}", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """A judge reply's verdict, or None when it states none.

    Tried in order: the official `correct: yes|no` line (the last one wins),
    a JSON object with `correct` (bool or yes/no) or `verdict`
    (correct/incorrect), `\\boxed{yes|no}`, and a last non-empty line that is
    only a verdict word ("Verdict: incorrect", "**Yes**").
    """
    if not isinstance(text, str):
        raise JudgeError(f"a judge reply must be text, got {type(text).__name__}")
    found = parse_judge(text)
    if found is not None:
        return found
    for blob in reversed(_JSON_OBJ.findall(text)):
        try:
            obj = json.loads(blob)
        except json.JSONDecodeError:
            continue
        for key in ("correct", "verdict", "is_correct"):
            value = obj.get(key) if isinstance(obj, dict) else None
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _YES | _NO:
                return value.strip().lower() in _YES
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].lower() in _YES
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if lines:
        m = _LAST_LINE.match(lines[-1].strip())
        if m:
            return m.group(1).lower() in _YES
    return None


def check_template(template: str) -> None:
    """Raise `JudgeError` unless the template uses only {question}, {response}, {reference}, and the last two."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise JudgeError(f"judge template is not a valid format string: {exc}") from exc
    unknown = fields - set(TEMPLATE_FIELDS)
    if unknown:
        raise JudgeError(f"judge template has unknown fields {sorted(unknown)}; allowed: {TEMPLATE_FIELDS}")
    missing = {"response", "reference"} - fields
    if missing:
        raise JudgeError(f"judge template must contain {sorted(missing)}")


def format_reference(golds: Sequence[str]) -> str:
    """One gold as itself; alternatives as 'any of: a; b'."""
    golds = [str(g) for g in golds]
    if not golds:
        raise JudgeError("the judge needs at least one gold answer")
    return golds[0] if len(golds) == 1 else "any of: " + "; ".join(golds)


def cache_key(question: str, golds: Sequence[str], response: str) -> str:
    """A stable key for (question, gold answers in any order, response)."""
    payload = json.dumps([question, sorted(str(g) for g in golds), response], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CachedVerdict:
    """One cached judgement: the inputs, the verdict and the judge's reply."""

    question: str
    golds: tuple[str, ...]
    response: str
    verdict: bool
    reply: str


_CACHE_SCHEMA = pa.schema([("key", pa.string()), ("question", pa.string()), ("golds", pa.list_(pa.string())),
                           ("response", pa.string()), ("verdict", pa.bool_()), ("reply", pa.string())])


class JudgeCache:
    """Verdicts by (question, golds, response), bound to one template; thread-safe, persistable."""

    def __init__(self, template: str = DEFAULT_TEMPLATE) -> None:
        self.template_sha = hashlib.sha256(template.encode()).hexdigest()
        self._entries: dict[str, CachedVerdict] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, question: str, golds: Sequence[str], response: str) -> CachedVerdict | None:
        with self._lock:
            return self._entries.get(cache_key(question, golds, response))

    def put(self, entry: CachedVerdict) -> None:
        with self._lock:
            self._entries[cache_key(entry.question, entry.golds, entry.response)] = entry

    def save(self, path: str | Path) -> Path:
        """Write the cache atomically to a `.json` or `.parquet` file."""
        path = Path(path)
        with self._lock:
            rows = [{"key": k, "question": e.question, "golds": list(e.golds), "response": e.response,
                     "verdict": e.verdict, "reply": e.reply} for k, e in sorted(self._entries.items())]
        tmp = path.with_name(path.name + ".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            tmp.write_text(json.dumps({"template_sha": self.template_sha, "entries": rows}, ensure_ascii=False))
        elif path.suffix == ".parquet":
            schema = _CACHE_SCHEMA.with_metadata({"librarian.judge_template_sha": self.template_sha})
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
        else:
            raise JudgeError(f"{path}: the judge cache is saved as .json or .parquet")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path, template: str = DEFAULT_TEMPLATE) -> JudgeCache:
        """Read a cache written by `save`; a cache made under another template is refused."""
        path = Path(path)
        cache = cls(template)
        if not path.is_file():
            raise JudgeError(f"{path}: judge cache not found")
        if path.suffix == ".json":
            try:
                data = json.loads(path.read_text())
                sha, rows = data["template_sha"], data["entries"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise JudgeError(f"{path}: not a judge cache (expected template_sha and entries): {exc}") from exc
        elif path.suffix == ".parquet":
            table = pq.read_table(path)
            sha = (table.schema.metadata or {}).get(b"librarian.judge_template_sha", b"").decode()
            rows = table.to_pylist()
        else:
            raise JudgeError(f"{path}: the judge cache is read from .json or .parquet")
        if sha != cache.template_sha:
            raise JudgeError(f"{path}: cached verdicts were made with another judge template "
                             f"(sha {sha[:12]} != {cache.template_sha[:12]}); use a new cache file")
        for r in rows:
            cache.put(CachedVerdict(r["question"], tuple(r["golds"]), r["response"], bool(r["verdict"]), r["reply"]))
        return cache


class LLMJudge:
    """Grades a response against gold answers by asking `generate` with a prompt template.

    Calling the judge returns True/False, or None when no verdict could be
    parsed after `retries` extra attempts (callers count None as wrong).
    Parsed verdicts are cached; unparsed ones are not, so a later call retries.
    """

    def __init__(self, generate: Generate, template: str = DEFAULT_TEMPLATE, *, retries: int = 1,
                 cache: JudgeCache | None = None, parse: Callable[[str], bool | None] = parse_verdict) -> None:
        if not callable(generate):
            raise JudgeError("LLMJudge needs a callable (prompt) -> text")
        if retries < 0:
            raise JudgeError(f"retries must be >= 0 (got {retries})")
        check_template(template)
        self.generate = generate
        self.template = template
        self.retries = retries
        self.parse = parse
        self.cache = cache if cache is not None else JudgeCache(template)
        if self.cache.template_sha != JudgeCache(template).template_sha:
            raise JudgeError("the judge cache was made for another template")
        self.calls = 0

    def prompt(self, question: str, golds: Sequence[str], response: str) -> str:
        """The prompt sent for one judgement."""
        return self.template.format(question=question, response=response, reference=format_reference(golds))

    def __call__(self, question: str, golds: Sequence[str], response: str) -> bool | None:
        hit = self.cache.get(question, golds, response)
        if hit is not None:
            return hit.verdict
        prompt = self.prompt(question, golds, response)
        for _ in range(self.retries + 1):
            self.calls += 1
            reply = self.generate(prompt)
            verdict = self.parse(reply)
            if verdict is not None:
                self.cache.put(CachedVerdict(question, tuple(str(g) for g in golds), response, verdict, reply))
                return verdict
        return None
