"""The answerer probe: a reader over questions on a frozen snapshot, graded per question.

A probe is (snapshot as Arrow IPC bytes, questions, `ReaderSpec`) ->
per-question `ExamResult`s. `ExamRunner` is the in-process probe: it opens
a snapshot once per content hash (a read-only `SnapshotView` and a search
index over it), builds the reader backend once, and runs the reader role's
episodes in batches. The Ray probe pool (`librarian.cluster.probe_pool`)
runs the same `ExamRunner` inside each worker, so a plain loop (`run_local`,
or `LocalProbes` for a run without probe workers) and the pool give identical
results for deterministic readers. The utility
of a probed snapshot is `librarian.rewards.construction.ProbeService`'s;
summaries and the comparison with the flat store are
`librarian.evaluation.exam`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tqdm import tqdm

from librarian.datasets.records import Question
from librarian.models import make_backend
from librarian.models.base import SamplingParams
from librarian.rewards.scoring import score_answer
from librarian.roles import LoopConfig, ToolContext, ToolEnv, kbgym_reader, librarian_answerer, run_episodes
from librarian.roles.kbgym_passes import forward_task
from librarian.roles.probing_env import snapshot
from librarian.search.factory import SearchConfig, make_index
from librarian.workspace import SnapshotView, Workspace, codec

READ_TOOLS = frozenset({"read", "open"})
ROLES = ("kbgym", "librarian")
ExamTask = tuple[int, Question, int]  # (position, question, repeat)


class ExamError(ValueError):
    """A bad exam request; the message names what was wrong."""


@dataclass
class ReaderSpec:
    """The reader of an exam: role, policy backend and its options, budget, memory, search."""

    role: str = "kbgym"  # kbgym (search / read / answer) | librarian (list / read / answer)
    backend: str = "scripted"
    options: dict = field(default_factory=lambda: {"policy": "kbgym_reader"})
    budget: int = 15  # the reader's actions per question (paper 001's M)
    memory: int = 30  # K: last k action-result pairs (-1: full history)
    max_new_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    search: SearchConfig = field(default_factory=lambda: SearchConfig(embedder="none"))
    search_mode: str = "bm25"
    answer_view: str = "all"
    read_sources: bool = False  # a KBGym read also shows the raw sources of the synthetic files it shows (what a
    # reader with `options.trust: provenance` verifies an index against)
    batch: int = 32  # episodes generated together

    def check(self) -> None:
        if self.role not in ROLES:
            raise ExamError(f"reader role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.budget < 1 or self.batch < 1:
            raise ExamError(f"reader budget and batch must be >= 1, got {self.budget} and {self.batch}")
        if dict(self.options).get("trust") == "provenance" and not self.read_sources:
            raise ExamError("a reader with options.trust=provenance checks an index against its raw sources: "
                            "set read_sources: true so that its reads show them")
        if self.search_mode != "bm25" and self.search.embedder == "none":
            raise ExamError(f"search_mode {self.search_mode!r} needs an embedder (search.embedder: minilm or "
                            "hashing); 'none' serves BM25 only")


@dataclass(frozen=True, slots=True)
class ExamResult:
    """One graded episode: score, cost, and what the reader read."""

    qid: str
    split: str
    qclass: str
    template: str
    repeat: int
    f1: float
    actions: int
    exhausted: bool
    answer: str | None
    end: str
    tokens_read: int
    files_read: int
    synthetic_read: int
    raw_read: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_bytes(store: SnapshotView | Workspace | bytes) -> bytes:
    """A store as Arrow IPC stream bytes (what crosses to probe workers)."""
    if isinstance(store, bytes | bytearray):
        return bytes(store)
    if isinstance(store, SnapshotView):
        return store.to_ipc_bytes()
    if isinstance(store, Workspace):
        return snapshot(store)
    raise ExamError(f"a snapshot must be IPC bytes, a SnapshotView or a Workspace, got {type(store).__name__}")


def snapshot_key(data: bytes) -> str:
    """The content hash of snapshot IPC bytes (probe caches are keyed by it)."""
    return codec.table_content_hash(codec.table_from_ipc_bytes(data, "IPC bytes"))


def opened(store: SnapshotView | Workspace | bytes) -> tuple[str, SnapshotView]:
    """A store's content hash and a read-only view of it: IPC bytes are decoded and hashed once."""
    view = store if isinstance(store, SnapshotView) else SnapshotView.from_ipc_bytes(snapshot_bytes(store))
    return codec.table_content_hash(view.table), view


def tasks_for(questions: Sequence[Question], repeats: int = 1) -> list[ExamTask]:
    """One task per (question, repeat), positions in order."""
    if repeats < 1:
        raise ExamError(f"repeats must be >= 1, got {repeats}")
    return [(i * repeats + r, q, r) for i, q in enumerate(questions) for r in range(repeats)]


class ExamRunner:
    """The in-process probe: snapshots opened once (LRU by content hash), one reader backend."""

    def __init__(self, spec: ReaderSpec, cache_size: int = 4) -> None:
        spec.check()
        self.spec = spec
        self.cache_size = cache_size
        self._stores: OrderedDict[str, tuple[SnapshotView, Any]] = OrderedDict()
        self._backend: Any = None

    def backend(self) -> Any:
        if self._backend is None:
            self._backend = make_backend(self.spec.backend, **dict(self.spec.options))
        return self._backend

    def has(self, key: str) -> bool:
        return key in self._stores

    def load(self, key: str, data: bytes | SnapshotView) -> None:
        """Open a snapshot (and index it for search) under `key`."""
        if key in self._stores:
            self._stores.move_to_end(key)
            return
        view = data if isinstance(data, SnapshotView) else SnapshotView.from_ipc_bytes(data)
        index = None
        if self.spec.role == "kbgym":
            index = make_index(self.spec.search)
            index.upsert(list(view))
            index.refresh(embed=True)
        self._stores[key] = (view, index)
        while len(self._stores) > self.cache_size:
            _, (_, old) = self._stores.popitem(last=False)
            if old is not None:
                old.close()

    def run(self, key: str, tasks: Sequence[ExamTask]) -> list[tuple[int, ExamResult]]:
        """The reader on every task over the snapshot `key` (loaded first); (position, result) pairs."""
        if key not in self._stores:
            raise ExamError(f"snapshot {key[:12]} is not loaded in this probe; load it first")
        view, index = self._stores[key]
        spec = self.spec
        memory = None if spec.memory < 0 else spec.memory
        make_role = kbgym_reader if spec.role == "kbgym" else librarian_answerer
        role = make_role(budget=spec.budget, memory_window=memory)
        ctx = ToolContext(view, index, None, search_mode=spec.search_mode, answer_view=spec.answer_view,  # type: ignore[arg-type]
                          read_sources=spec.read_sources)
        out: list[tuple[int, ExamResult]] = []
        for start in range(0, len(tasks), spec.batch):
            chunk = tasks[start:start + spec.batch]
            loop = LoopConfig(SamplingParams(max_new_tokens=spec.max_new_tokens, temperature=spec.temperature,
                                             seed=spec.seed + chunk[0][2]))
            envs = [ToolEnv(role, ctx, forward_task(q.question)) for _, q, _ in chunk]
            for (pos, q, rep), traj in zip(chunk, run_episodes(envs, self.backend(), role, loop), strict=True):
                out.append((pos, grade(q, rep, traj, view)))
        return out


def grade(question: Question, repeat: int, traj: Any, src: Any) -> ExamResult:
    """An episode graded with the question's official metric, with its reading costs."""
    read_ids = dict.fromkeys(i for t in traj.turns if any(c["name"] in READ_TOOLS for c in t.calls)
                             for i in t.nodes_touched)
    kinds = [n.kind for n in (src.get(i) for i in read_ids) if n is not None]
    return ExamResult(question.id, question.split, question.qclass, question.template, repeat,
                      float(score_answer(question, traj.answer)), traj.actions, traj.budget_exhausted, traj.answer,
                      traj.end, traj.est_tokens_read, len(kinds), kinds.count("synthetic"), kinds.count("raw"))


class LocalProbes:
    """The probes of a run without probe workers (`probe.workers: 0`): the snapshots probed one after the other
    in this process by one `ExamRunner`, each decoded once (`construction.Probes`, as the Ray `ProbePool` is)."""

    def __init__(self, spec: ReaderSpec) -> None:
        self.runner = ExamRunner(spec)

    def run_many(self, snapshots: Sequence[tuple[str, bytes, Sequence[Question]]], repeats: int = 1
                 ) -> list[list[ExamResult]]:
        """Per (content hash, IPC bytes, questions), the graded answers in question order (x `repeats`)."""
        out = []
        for key, data, questions in snapshots:
            self.runner.load(key, data)
            out.append(graded(self.runner, key, tasks_for(questions, repeats)))
        return out

    def close(self) -> None:
        """Nothing to stop (the pool's `close` stops its workers)."""


def run_local(store: SnapshotView | Workspace | bytes, questions: Sequence[Question], spec: ReaderSpec,
              repeats: int = 1, runner: ExamRunner | None = None, chunk: int = 32,
              progress: Callable[[int, int], None] | None = None) -> list[ExamResult]:
    """The plain in-process loop: the same probe as a pool worker runs, in this process."""
    runner = runner or ExamRunner(spec)
    key, view = opened(store)
    runner.load(key, view)
    return graded(runner, key, tasks_for(questions, repeats), chunk, progress)


def graded(runner: ExamRunner, key: str, tasks: Sequence[ExamTask], chunk: int = 32,
           progress: Callable[[int, int], None] | None = None) -> list[ExamResult]:
    """`tasks` on the snapshot `key` (loaded in `runner`), `chunk` at a time; the results in task order."""
    results: dict[int, ExamResult] = {}
    with tqdm(total=len(tasks), desc="exam", unit="ep", leave=False, disable=len(tasks) < 2) as bar:
        for start in range(0, len(tasks), chunk):
            for pos, res in runner.run(key, tasks[start:start + chunk]):
                results[pos] = res
            bar.update(min(chunk, len(tasks) - start))
            if progress is not None:
                progress(len(results), len(tasks))
    return [results[i] for i in range(len(tasks))]
