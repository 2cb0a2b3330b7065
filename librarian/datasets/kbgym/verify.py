"""An independent check of KBGym golds: parse the documents' text back into facts and
re-derive every question's answers by brute force, without the generator's graph.

`verify(corpus, questions)` returns a list of problems (empty when every gold
and every support set checks out).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable

from librarian.datasets.records import CorpusDoc, Question

_PATTERNS = [
    (re.compile(r"^(?P<s>.+) lives in (?P<o>.+)\.$"), "city"),
    (re.compile(r"^(?P<s>.+) was born on (?P<o>\d{4}-\d{2}-\d{2})\.$"), "birthdate"),
    (re.compile(r"^(?P<s>.+)'s (?P<r>job|hobby|mother|father|child|sibling|spouse|friend) is (?P<o>.+)\.$"), None),
]


class Facts:
    """(relation, subject name) -> {object: doc id}, parsed from sentences."""

    def __init__(self, corpus: Iterable[CorpusDoc]):
        self.rel: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
        self.people: set[str] = set()
        self.unparsed: list[str] = []
        for d in corpus:
            for pat, rel in _PATTERNS:
                m = pat.match(d.text)
                if m:
                    r = rel or m.group("r")
                    self.rel[r][m.group("s")][m.group("o")] = d.id
                    self.people.add(m.group("s"))
                    break
            else:
                self.unparsed.append(d.id)

    def get(self, rel: str, subj: str) -> dict[str, str]:
        return self.rel[rel].get(subj, {})

    def attr(self, subj: str, rel: str) -> tuple[str, str]:
        ((value, doc),) = self.get(rel, subj).items()
        return value, doc

    def with_attr(self, rel: str, value: str) -> list[str]:
        return sorted(s for s in self.people if value in self.get(rel, s))


def _derive(f: Facts, template: str, s: dict[str, str]) -> tuple[list[str], set[str]]:
    """(gold answers, evidence doc ids) recomputed for one question by brute force."""
    ev: set[str] = set()
    kind = template.split("_", 1)[1]
    if template.startswith("qc1_"):
        v, d = f.attr(s["person"], kind)
        return [v], {d}
    if template in ("qc2_rel_job", "qc2_rel_city"):
        ((r, d1),) = f.get(s["rel"], s["person"]).items()
        v, d2 = f.attr(r, template.rsplit("_", 1)[1])
        return [v], {d1, d2}
    if template.startswith(("qc2_rel_rel", "qc3_")):
        ((r1, d1),) = f.get(s["rel1"], s["person"]).items()
        ((r2, d2),) = f.get(s["rel2"], r1).items()
        if template == "qc2_rel_rel":
            return [r2], {d1, d2}
        v, d3 = f.attr(r2, template.rsplit("_", 1)[1])
        return [v], {d1, d2, d3}
    if template in ("qc4_city_count", "qc4_job_count"):
        attr = template.split("_")[1]
        members = f.with_attr(attr, s[attr])
        return [str(len(members))], {f.get(attr, m)[s[attr]] for m in members}
    if template == "qc4_friend_count":
        fr = f.get("friend", s["person"])
        return [str(len(fr))], set(fr.values())
    if template.startswith("qc5_"):
        rel = template.split("_")[-1]
        if f.get(rel, s["person"]):
            return ["<answerable>"], set()
        return ["unknown"], set()
    if template.startswith("qc6_") or template == "qc8_city_hobby_count":
        a1, a2 = [k for k in s]
        members = [p for p in f.people if s[a1] in f.get(a1, p) and s[a2] in f.get(a2, p)]
        ev = {f.get(a, m)[s[a]] for m in members for a in (a1, a2)}
        if template.startswith("qc8"):
            return [str(len(members))], ev
        return sorted(members), ev
    if template == "qc7_common_friends":
        f1, f2 = f.get("friend", s["person1"]), f.get("friend", s["person2"])
        common = sorted(set(f1) & set(f2))
        return common, {f1[c] for c in common} | {f2[c] for c in common}
    if template in ("qc7_friend_in_city", "qc7_friends_job"):
        attr = "city" if "city" in s else "job"
        fr = f.get("friend", s["person"])
        members = sorted(m for m in fr if s[attr] in f.get(attr, m))
        return members, {fr[m] for m in members} | {f.get(attr, m)[s[attr]] for m in members}
    if template == "qc8_grandchildren_count":
        grand = set()
        for ch, d1 in f.get("child", s["person"]).items():
            for g, d2 in f.get("child", ch).items():
                grand.add(g)
                ev |= {d1, d2}
        return [str(len(grand))], ev
    if template in ("qc9_oldest_in_city", "qc9_youngest_job", "qc9_oldest_friend"):
        if template == "qc9_oldest_friend":
            fr = f.get("friend", s["person"])
            members, ev = list(fr), set(fr.values())
        else:
            attr = "city" if "city" in s else "job"
            members = f.with_attr(attr, s[attr])
            ev = {f.get(attr, m)[s[attr]] for m in members}
        dated = sorted((f.attr(m, "birthdate")[0], m) for m in members)
        ev |= {f.attr(m, "birthdate")[1] for m in members}
        pick = dated[-1] if "youngest" in template else dated[0]
        return [pick[1]], ev
    if template == "qc10_birthdate":
        born = [p for p in f.people if s["date"] in f.get("birthdate", p)]
        return born, {f.get("birthdate", p)[s["date"]] for p in born}
    if template == "qc10_parent_job":
        kids = [(c, d) for c, d in f.get("child", s["person"]).items() if s["job"] in f.get("job", c)]
        if len(kids) != 1:
            return ["<not unique>"], set()
        (c, d), = kids
        return [c], {d, f.get("job", c)[s["job"]]}
    raise KeyError(f"no brute-force check for template {template!r}")


def verify(corpus: list[CorpusDoc], questions: list[Question]) -> list[str]:
    """Problems found re-deriving each question's gold and evidence (empty list: all good)."""
    facts = Facts(corpus)
    ids = {d.id for d in corpus}
    problems = [f"document {i} matches no fact template" for i in facts.unparsed]
    for q in questions:
        slots = json.loads(q.extra["slots"])
        try:
            gold, evidence = _derive(facts, q.template, slots)
        except (KeyError, ValueError) as e:
            problems.append(f"{q.id} ({q.template}): cannot re-derive: {e!r}")
            continue
        if sorted(gold) != sorted(q.answers):
            problems.append(f"{q.id} ({q.template}): gold {q.answers} but brute force gives {gold}")
        if not set(q.support) <= ids:
            problems.append(f"{q.id}: support names unknown documents")
        if not evidence <= set(q.support):
            problems.append(f"{q.id} ({q.template}): support lacks evidence {sorted(evidence - set(q.support))}")
        if q.template.startswith("qc5_"):
            subj_docs = {d.id for d in corpus if d.title == slots["person"]}
            if set(q.support) != subj_docs:
                problems.append(f"{q.id}: abstention support is not the subject's documents")
    return problems
