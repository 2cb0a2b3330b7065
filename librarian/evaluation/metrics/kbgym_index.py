"""Judging KBGym indexes against the universe (paper 001 §VII-D): resolve each authored index's
key from its text, then score its links by what the documents they point at are about.

Key kinds: `attribute:city`, `attribute:job`, `attribute:hobby` (everyone with
that value), `hub` (one person), `relation:1hop` (friends, children, parents,
siblings, spouse, mother, father of a person), `relation:2hop`
(grandchildren, grandparents). A text naming a relation resolves to the
relation of the first person it names; otherwise exactly one attribute value
resolves to an attribute key; otherwise exactly one person to a hub. Anything
else (a join of two attributes, several people) is unresolved.

A link is correct when its target is a source document about a genuine
member: the member is the fact's subject or, for a person relation, its
object (resolved through the node's hidden `origin`, never by string match).
An index whose text names a member of its own key states the answer rather
than pointing at it: `materialized`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from librarian.datasets.kbgym.facts import PERSON_RELATIONS
from librarian.datasets.kbgym.universe import Universe
from librarian.evaluation.metrics.index_quality import AuthoredIndex, Status
from librarian.workspace.nodes import Node, NodeSource

ATTRIBUTE_KINDS = ("city", "job", "hobby")
# word -> relation path (applied left to right from the anchor person)
RELATION_WORDS: dict[str, tuple[str, ...]] = {
    "friend": ("friend",), "friends": ("friend",),
    "child": ("child",), "children": ("child",), "kids": ("child",), "sons": ("child",), "daughters": ("child",),
    "son": ("child",), "daughter": ("child",),
    "mother": ("mother",), "father": ("father",), "parent": ("parent",), "parents": ("parent",),
    "spouse": ("spouse",), "husband": ("spouse",), "wife": ("spouse",),
    "sibling": ("sibling",), "siblings": ("sibling",), "brother": ("sibling",), "brothers": ("sibling",),
    "sister": ("sibling",), "sisters": ("sibling",),
    "grandchild": ("child", "child"), "grandchildren": ("child", "child"), "grandson": ("child", "child"),
    "grandsons": ("child", "child"), "granddaughter": ("child", "child"), "granddaughters": ("child", "child"),
    "grandparent": ("parent", "parent"), "grandparents": ("parent", "parent"),
    "grandmother": ("parent", "parent"), "grandfather": ("parent", "parent"),
}


@dataclass(frozen=True, slots=True)
class Key:
    """A resolved key: its kind, a label, the anchor person (hub, relation) and the member people."""

    kind: str
    label: str
    anchor: str | None
    members: frozenset[str]


def _alternation(values: list[str], plural: bool = False) -> re.Pattern[str]:
    suffix = r"(?:s|es)?" if plural else ""
    body = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])({body}){suffix}(?![\w-])", re.IGNORECASE)


class KBGymKeys:
    """Key resolution and link judging for one universe."""

    def __init__(self, universe: Universe) -> None:
        self.u = universe
        self.names = {p.name.lower(): p.pid for p in universe.people.values()}
        self.by_attr: dict[tuple[str, str], set[str]] = defaultdict(set)
        for p in universe.people.values():
            for kind in ATTRIBUTE_KINDS:
                self.by_attr[(kind, getattr(p, kind).lower())].add(p.pid)
        self.attr_kind = {value: kind for kind, value in self.by_attr}
        self._person_re = _alternation([p.name for p in universe.people.values()])
        self._attr_re = _alternation([v for _, v in self.by_attr], plural=True)
        self._rel_re = re.compile(r"\b(" + "|".join(sorted(RELATION_WORDS, key=len, reverse=True)) + r")\b",
                                  re.IGNORECASE)

    def _related(self, pids: set[str], rel: str) -> set[str]:
        out: set[str] = set()
        for pid in pids:
            rels = ("mother", "father") if rel == "parent" else (rel,)
            for r in rels:
                out.update(self.u.relation(pid, r))
        return out

    def resolve(self, text: str) -> Key | None:
        """The key an index's text names, or None when it names none unambiguously."""
        people = list(dict.fromkeys(self.names[m.group(1).lower()] for m in self._person_re.finditer(text)))
        attrs = list(dict.fromkeys(m.group(1).lower() for m in self._attr_re.finditer(text)))
        rels = list(dict.fromkeys(RELATION_WORDS[m.group(1).lower()] for m in self._rel_re.finditer(text)))
        if rels:
            if not people or attrs or len(rels) > 1:
                return None
            anchor, path = people[0], rels[0]
            members = {anchor}
            for step in path:
                members = self._related(members, step)
            kind = "relation:1hop" if len(path) == 1 else "relation:2hop"
            return Key(kind, f"{'/'.join(path)} of {self.u.people[anchor].name}", anchor, frozenset(members))
        if attrs:
            if len(attrs) > 1:
                return None
            kind = self.attr_kind[attrs[0]]
            return Key(f"attribute:{kind}", f"{kind}={attrs[0]}", None, frozenset(self.by_attr[(kind, attrs[0])]))
        if len(people) == 1:
            return Key("hub", self.u.people[people[0]].name, people[0], frozenset(people))
        return None

    @staticmethod
    def about(node: Node) -> frozenset[str] | None:
        """The people a source document is about (from its origin `rel:subj:obj`), None if not a fact."""
        if node.kind != "raw" or not node.origin or node.origin.count(":") < 2:
            return None
        rel, subj, obj = node.origin.split(":", 2)
        return frozenset((subj, obj)) if rel in PERSON_RELATIONS else frozenset((subj,))

    def listed_members(self, text: str, key: Key) -> set[str]:
        """Members of `key` (other than its anchor) whose names appear in `text`."""
        named = {self.names[m.group(1).lower()] for m in self._person_re.finditer(text)}
        return (named & key.members) - {key.anchor}

    def record(self, node: Node, src: NodeSource, own: dict[str, set[str]] | None = None) -> AuthoredIndex:
        """Judge one authored index node (`own`: raw document ids by subject, from `own_documents`)."""
        key = self.resolve(node.text)
        degree = len(node.links)
        if key is None:
            return AuthoredIndex(node.id, None, "", "empty" if not degree else "unresolved", degree)
        status: Status = "empty" if not degree else ("materialized" if self.listed_members(node.text, key)
                                                     else "index")
        scored = correct = 0
        hit_people: set[str] = set()
        targets: set[str] = set()
        for target_id in node.links:
            target = src.get(target_id)
            about = self.about(target) if target is not None else None
            if about is None:
                continue
            scored += 1
            if key.kind == "hub":
                good = key.anchor in about
            else:
                good = bool(about & key.members)
            if good:
                correct += 1
                targets.add(target_id)
                hit_people |= about & key.members
        if key.kind == "hub":  # members of a hub: the person's own documents
            docs = (own if own is not None else own_documents(src)).get(key.anchor or "", set())
            members, members_hit = len(docs), len(docs & targets)
        else:
            members, members_hit = len(key.members), len(hit_people)
        return AuthoredIndex(node.id, key.kind, key.label, status, degree, scored, correct, members, members_hit,
                           frozenset(targets))


def own_documents(src: NodeSource) -> dict[str, set[str]]:
    """Active raw document ids by the person their fact is about as subject."""
    out: dict[str, set[str]] = defaultdict(set)
    for n in src:
        if n.kind == "raw" and n.origin and n.origin.count(":") >= 2:
            out[n.origin.split(":", 2)[1]].add(n.id)
    return out


def kbgym_index_records(src: NodeSource, universe: Universe) -> list[AuthoredIndex]:
    """Judge every active synthetic node of a KBGym workspace against its universe."""
    keys = KBGymKeys(universe)
    own = own_documents(src)
    return [keys.record(n, src, own) for n in src if n.kind == "synthetic"]
