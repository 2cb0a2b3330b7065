"""No hint ever leaks a gold answer or a gold source (paper 002: hints nudge, they never reveal the answer
or prescribe the search path), over every training question the training pipelines hand to a hint generator:
the researcher's Memory-Gym questions (`hint_input`) and the builder's KBGym corpora (`Corpus.hints()`)."""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import zip_longest

import pytest

from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.datasets.memorygym import MemoryGymConfig
from librarian.evaluation.memory_tasks import memorygym_task
from librarian.models.scripted import ScriptedBackend
from librarian.pipelines.builder.config import BuilderDataConfig
from librarian.pipelines.builder.corpora import make_corpora
from librarian.pipelines.researcher.config import ResearcherDataConfig
from librarian.pipelines.researcher.steps import hint_input
from librarian.roles.builder_hints import HintReference, builder_hint
from librarian.roles.researcher_hints import HintInput, LLMHinter, scripted_hint


def leaks(hint: str | None, secrets) -> list[str]:
    """The secrets a hint contains: as a whole word (case-insensitive), or anywhere when 4+ characters long."""
    if hint is None:
        return []
    low = hint.lower()
    out = []
    for s in {s.strip() for s in secrets if s.strip()}:
        if re.search(rf"(?<!\w){re.escape(s.lower())}(?!\w)", low) or (len(s) >= 4 and s.lower() in low):
            out.append(s)
    return out


def _source_secrets(paths) -> set[str]:
    return {x for p in paths for x in (p, p.rsplit("/", 1)[-1])}


def test_the_leak_check_catches_hints_of_the_old_kind():
    old_builder = ('Hint: readers will ask "What is Cyril Everly\'s job?" (answer: florist). The evidence is in '
                   "facts/kb00683; consolidate it with create_file so a reader finds it in one read.")
    assert leaks(old_builder, {"florist"}) == ["florist"]
    assert leaks(old_builder, _source_secrets(["facts/kb00683"])) != []
    old_researcher = "Hint: look for 'Ada Moss' (person); the source sessions/session-010 holds evidence."
    assert leaks(old_researcher, _source_secrets(["sessions/session-010"])) != []
    assert leaks("Hint: nothing here", {"no", "2"}) == []  # 'no' inside 'nothing' is not the answer 'no'


# ---- the researcher (paper 002): every training question of a Memory-Gym history -----------------------------


def _memorygym_train(cfg: MemoryGymConfig):
    task = memorygym_task(cfg)
    train = [q for q in task.questions if q.split == "train" and q.support]  # as train_researcher.load_task
    assert train
    return task, train


_D = ResearcherDataConfig()
HISTORIES = [MemoryGymConfig(speakers=_D.speakers, sessions=_D.sessions, seed=_D.seed, test_fraction=_D.test_fraction),
             MemoryGymConfig()]


def _transcripts(task, h: HintInput) -> list[str]:
    """Empty, then growing: the question's keys, then sessions read one by one (gold ones among others)."""
    text = {d.id: d.text for d in task.sessions}
    gold = [e.rsplit("/", 1)[-1] for e in h.evidence]
    others = [s for s in text if s not in gold][:3]
    order = [s for pair in zip_longest(others, gold) for s in pair if s]  # other, gold, other, gold, ...
    out, log = ["", " ".join(h.keys)], [h.question]
    for sid in order:
        log.append(f"read sessions/{sid}\n[raw] sessions/{sid}  id={sid}\n---\n{text[sid]}")
        out.append("\n".join(log))
    return out


@pytest.mark.parametrize("cfg", HISTORIES, ids=["researcher-default", "memorygym-default"])
def test_scripted_researcher_hints_never_leak(cfg):
    task, train = _memorygym_train(cfg)
    given = 0
    for q in train:
        h = hint_input(q)
        secrets = set(q.answers) | _source_secrets(h.evidence)
        for transcript in _transcripts(task, h):
            hint = scripted_hint(replace(h, transcript=transcript))
            assert not leaks(hint, secrets), (q.id, q.question, hint)
            given += hint is not None
        assert scripted_hint(replace(h, transcript="")) is not None  # something is missing at the start
    assert given >= len(train)


def _echo(h: HintInput):
    """A backend that leaks everything it can: the sources (closed over), the answers and the prompt."""
    return ScriptedBackend(lambda m, t: f"Open {', '.join(h.evidence)} ({' '.join(e.rsplit('/', 1)[-1] for e in h.evidence)}); "
                                        f"the answer is {' or '.join(h.answers)}. {m[-1]['content']}")


@pytest.mark.parametrize("cfg", HISTORIES[:1], ids=["researcher-default"])
def test_llm_hinter_never_sees_the_sources_and_redacts_them(cfg):
    task, train = _memorygym_train(cfg)
    for q in train:
        h = hint_input(q)
        secrets = set(q.answers) | _source_secrets(h.evidence)
        prompts: list[str] = []
        spy = ScriptedBackend(lambda m, t: prompts.append(m[-1]["content"]) or "ok")  # noqa: B023
        LLMHinter(spy)(h)
        assert not leaks(prompts[0], _source_secrets(h.evidence)), prompts[0]  # the prompt has no gold source
        for transcript in _transcripts(task, h)[:4]:
            ref = replace(h, transcript=transcript)
            hint = LLMHinter(_echo(ref))(ref)
            assert hint is not None and hint.startswith("Hint:")
            assert not leaks(hint, secrets), (q.id, hint)


# ---- the builder (paper 000 ablation): every training question of the KBGym builder corpora ----------------------

_B = BuilderDataConfig()
CORPORA = [  # (people, seed, corpora, questions, docs, max_support): BuilderDataConfig defaults and a larger universe
    (_B.people, _B.seed, _B.train_corpora, _B.questions_per_corpus, _B.docs_per_corpus, _B.max_support),
    (200, 2, 64, 2, 24, 3),
]


def _train_corpora(people, seed, count, questions, docs, max_support):
    kb = build_kbgym(people=people, seed=seed, sizes=SplitSizes(train=max(30, count * 4), test_in=20, test_out=10,
                                                                 eval_in=5, eval_out=5))  # as train_builder.run
    return make_corpora(kb, count, questions=questions, docs=docs, splits=("train",), seed=seed, prefix="c",
                        max_support=max_support)


def _consolidated_sets(refs: list[HintReference]) -> list[set[str]]:
    support = [p for r in refs for p in r.support]
    return [set(), set(refs[0].support), set(support[: len(support) // 2]), {p for r in refs for p in r.support[1:]},
            set(support[:-1])]


@pytest.mark.parametrize("data", CORPORA, ids=["builder-default", "builder-200-people"])
def test_builder_hints_never_leak(data):
    corpora = _train_corpora(*data)
    for corpus in corpora:
        secrets = {a for q in corpus.questions for a in q.answers}
        secrets |= _source_secrets([d.path for d in corpus.docs]) | {d.id for d in corpus.docs}
        plain = corpus.hints()
        keyed = [replace(r, keys=tuple(q.keys)) for r, q in zip(plain, corpus.questions, strict=True)]
        for refs in (plain, keyed):
            for done in _consolidated_sets(refs):
                for turn in (0, 1, 2, 3, 4, 7, 8, 16, 31):
                    hint = builder_hint(refs, done, turn)
                    assert not leaks(hint, secrets), (corpus.corpus_id, turn, hint)
                    if any(p not in done for r in refs for p in r.support):
                        assert hint is not None and hint.startswith("Hint: readers will ask about")
            for turn in range(len(refs)):  # nothing consolidated: the hint is about question `turn`
                hint = builder_hint(refs, set(), turn)
                q = corpus.questions[turn]
                names = [k.split(":", 1)[1] for k in q.keys if k.split(":", 1)[0] in ("person", "city")]
                names = [n for n in names if not leaks(n, secrets)]
                if names:
                    assert any(n in hint for n in names), (q.question, hint)
            assert builder_hint(refs, {p for r in refs for p in r.support}, 0) is None
