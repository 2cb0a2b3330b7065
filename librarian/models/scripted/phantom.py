"""What the scripted PhantomWiki policies read: question grammar, fact sentences, kinship terms.

PhantomWiki asks questions from a recursive grammar:

    S   -> Who is R ? | What is the <attribute> of R ? | How many <relations> does Rc have ?
    R   -> the <relation> of Rc | the person whose <attribute> is <value>
    Rc  -> R | <name>

`parse_question` turns the wording into a nested expression of any depth;
`parse_facts` reads a fact sentence ("The mother of X is Y.", also a list
sentence "The friends of X are A, B."). Kinship terms ("aunt", "female
second cousin", "sister-in-law") are defined over five base relations
(parent, child, sibling, spouse, friend) plus gender, the way the generator
defines them; this is vocabulary a reader brings, not something read from a
universe. Nothing here sees a gold answer or the universe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from librarian.models.scripted.kbgym import parse_fact
from librarian.models.scripted.kbgym import parse_question as kbgym_question

BASE_RELATIONS = ("parent", "child", "sibling", "spouse", "friend")
# attribute nouns as articles and questions write them -> the attribute
ATTRIBUTE_NOUNS = {"date of birth": "dob", "occupation": "job", "job": "job", "hobby": "hobby", "gender": "gender"}
ATTRIBUTE_WORDS = {"dob": "date of birth", "job": "occupation", "hobby": "hobby", "gender": "gender"}
# a fact's relation noun -> (base relation, the gender it states of its object)
STATED = {
    "mother": ("parent", "female"), "father": ("parent", "male"), "parent": ("parent", None),
    "daughter": ("child", "female"), "son": ("child", "male"), "child": ("child", None),
    "sister": ("sibling", "female"), "brother": ("sibling", "male"), "sibling": ("sibling", None),
    "wife": ("spouse", "female"), "husband": ("spouse", "male"), "spouse": ("spouse", None),
    "friend": ("friend", None),
}


@dataclass(frozen=True, slots=True)
class Kin:
    """A kinship term: follow `path` (base relations or other terms) from a person, keep one `gender`,
    and drop the person themself when `not_self`."""

    path: tuple[str, ...]
    gender: str | None = None
    not_self: bool = False


def _kin() -> dict[str, Kin]:
    f, m = "female", "male"
    terms = {r: Kin((r,)) for r in BASE_RELATIONS}
    gendered = {  # term -> (path, female word, male word)
        "parent": (("parent",), "mother", "father"), "child": (("child",), "daughter", "son"),
        "sibling": (("sibling",), "sister", "brother"), "spouse": (("spouse",), "wife", "husband"),
        "grandparent": (("parent", "parent"), "grandmother", "grandfather"),
        "grandchild": (("child", "child"), "granddaughter", "grandson"),
        "great_grandparent": (("grandparent", "parent"), "great_grandmother", "great_grandfather"),
        "great_grandchild": (("grandchild", "child"), "great_granddaughter", "great_grandson"),
        "_nibling": (("sibling", "child"), "niece", "nephew"),
        "_pibling": (("parent", "sibling"), "aunt", "uncle"),
        "_grand_pibling": (("grandparent", "sibling"), "great_aunt", "great_uncle"),
        "_second_pibling": (("great_grandparent", "sibling"), "second_aunt", "second_uncle"),
        "_parent_in_law": (("spouse", "parent"), "mother_in_law", "father_in_law"),
        "_child_in_law": (("child", "spouse"), "daughter_in_law", "son_in_law"),
        "_sibling_in_law": (("spouse", "sibling"), "sister_in_law", "brother_in_law"),
    }
    for term, (path, fem, mal) in gendered.items():
        if not term.startswith("_") and term not in terms:
            terms[term] = Kin(path)
        via = path if term.startswith("_") else (term,)  # "grandmother": the grandparents who are female
        terms[fem], terms[mal] = Kin(via, f), Kin(via, m)
    terms["cousin"] = Kin(("parent", "sibling", "child"), None, True)
    for g in (f, m):
        terms[f"{g}_cousin"] = Kin(("cousin",), g)
        terms[f"{g}_second_cousin"] = Kin(("parent", "cousin", "child"), g, True)
        terms[f"{g}_first_cousin_once_removed"] = Kin(("cousin", "child"), g, True)
    return terms


KIN: dict[str, Kin] = _kin()


def canonical(noun: str) -> str:
    """A relation noun as a term name ("great-aunt" -> "great_aunt", "Sisters-in-law" -> "sister_in_law")."""
    words = " ".join(noun.lower().split())
    key = re.sub(r"[\s-]+", "_", words)
    if key in KIN or key in STATED:
        return key
    return PLURALS.get(words, re.sub(r"[\s-]+", "_", _singular_words(words)))


def surface(term: str) -> str:
    """A term as PhantomWiki writes it ("great_aunt" -> "great-aunt", "second_aunt" -> "second aunt")."""
    return term.replace("great_", "great-").replace("_in_law", "-in-law").replace("_", " ")


def plural(term: str) -> str:
    """A term's plural wording ("sister_in_law" -> "sisters-in-law", "grandchild" -> "grandchildren")."""
    words = surface(term)
    for tail in ("-in-law", " once removed"):
        if words.endswith(tail):
            return _plural_word(words[: -len(tail)]) + tail
    return _plural_word(words)


def _plural_word(words: str) -> str:
    if words.endswith("child"):
        return words + "ren"
    if words.endswith("wife"):
        return words[:-2] + "ves"
    return words + "s"


def _singular_words(words: str) -> str:
    for tail in ("-in-law", " once removed"):
        if words.endswith(tail):
            return _singular_words(words[: -len(tail)]) + tail
    if words.endswith("children"):
        return words[:-3]
    if words.endswith("wives"):
        return words[:-3] + "fe"
    return words[:-1] if words.endswith("s") and not words.endswith("ss") else words


PLURALS: dict[str, str] = {plural(t): t for t in KIN} | {plural(t): t for t in STATED}


# ---- facts ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhantomFact:
    """(subject, relation, object): a relation noun ("mother") or an attribute ("job", "dob")."""

    subj: str
    rel: str
    obj: str


_CITATION = re.compile(r"^(?:(?![.!?]\s)[^:\n])+: (?=The )")
_STATEMENT = re.compile(r"^(?P<s>.+?) (?P<verb>is|are) (?P<o>.+?)\.?$")


def _noun_and_rest(text: str) -> tuple[str, str] | None:
    """Split "date of birth of X ..." into the attribute noun and the rest (known nouns first)."""
    for noun in sorted(ATTRIBUTE_NOUNS, key=len, reverse=True):
        if text.startswith(noun + " of "):
            return noun, text[len(noun) + 4:]
    head, sep, rest = text.partition(" of ")
    return (head, rest) if sep else None


def parse_facts(text: str) -> list[PhantomFact]:
    """The facts one sentence states (several for a list sentence); [] when it is not a fact sentence.

    A leading `<path>: ` citation is skipped; a line holding more than one
    sentence is read sentence by sentence.
    """
    line = " ".join(text.split())
    while (m := _CITATION.match(line)) is not None:
        line = line[m.end():]
    parts = re.split(r"(?<=\.) (?=The )", line)
    if len(parts) > 1:
        return [f for p in parts for f in parse_facts(p)]
    if not line.startswith("The "):
        return []
    split = _noun_and_rest(line[4:])
    if split is None:
        return []
    m = _STATEMENT.match(split[1])
    if m is None:
        return []
    noun = split[0].lower()
    rel = ATTRIBUTE_NOUNS.get(noun) or canonical(noun)
    objects = [o.strip() for o in m["o"].split(", ")] if m["verb"] == "are" else [m["o"].strip()]
    return [PhantomFact(m["s"].strip(), rel, o) for o in objects if o]


# ---- questions -----------------------------------------------------------------------------

# Expressions (nested tuples):
#   ("name", name)                   one person
#   ("whose", attribute, value)      everyone whose attribute is value
#   ("rel", term, expr)              the union of term(x) over the people of expr
#   ("attr", attribute, expr)        the attribute values of the people of expr     (What is ...)
#   ("count", term, expr)            the number of term(x) for each person x of expr (How many ...)
Expr = tuple


class QuestionError(ValueError):
    """The wording is not PhantomWiki's question grammar."""


def _rc(text: str) -> Expr:
    return _r(text) if text.startswith("the ") else ("name", text)


def _r(text: str) -> Expr:
    if text.startswith("the person whose "):
        attr, sep, value = text[len("the person whose "):].partition(" is ")
        if not sep or not value:
            raise QuestionError(f"no value after 'whose {attr}'")
        return ("whose", ATTRIBUTE_NOUNS.get(attr, attr), value)
    if not text.startswith("the "):
        raise QuestionError(f"expected 'the ...', got {text!r}")
    term, sep, rest = text[4:].partition(" of ")
    if not sep or not rest:
        raise QuestionError(f"expected 'the <relation> of ...', got {text!r}")
    return ("rel", canonical(term), _rc(rest))


def parse_question(question: str) -> Expr | None:
    """The expression a PhantomWiki question asks for, or None when the wording is not its grammar."""
    text = " ".join(question.split())
    try:
        if m := re.fullmatch(r"Who is (.+?) ?\?", text):
            return ("who", _r(m[1]))
        if m := re.fullmatch(r"What is the (.+?) ?\?", text):
            split = _noun_and_rest(m[1])
            if split is None:
                return None
            return ("attr", ATTRIBUTE_NOUNS.get(split[0], split[0]), _r(split[1]))
        if m := re.fullmatch(r"How many (.+?) does (.+) have ?\?", text):
            return ("count", canonical(m[1]), _rc(m[2]))
    except QuestionError:
        return None
    return None


def is_phantom_question(question: str) -> bool:
    """True when the wording parses as PhantomWiki's grammar with known kinship terms."""
    expr = parse_question(question)
    return expr is not None and all(t in KIN for t in expr_terms(expr))


def reads_as_phantom(question: str, texts: Sequence[str]) -> bool:
    """Whether a KBGym policy should hand this question to the PhantomWiki one.

    Yes for PhantomWiki wording KBGym's grammar does not read; for wording
    both read ("How many friends does X have?") only once the store's text
    seen so far (`texts`) holds PhantomWiki fact sentences and no KBGym ones.
    """
    if not is_phantom_question(question):
        return False
    if kbgym_question(question) is None:
        return True
    lines = [line for t in texts for line in t.splitlines()]
    return any(parse_facts(x) for x in lines) and not any(parse_fact(x) for x in lines)


def event_texts(events: Sequence[Any]) -> list[str]:
    """The document texts a transcript's observations show (search hits, reads and their links)."""
    out: list[str] = []
    for e in events:
        out += [h.text for h in e.hits] + [e.read_text] + [x.text for x in e.linked]
    return out


def expr_terms(expr: Expr) -> list[str]:
    """The kinship terms an expression uses, outermost first."""
    kind = expr[0]
    if kind in ("rel", "count"):
        return [expr[1], *expr_terms(expr[2])]
    if kind in ("who", "attr"):
        return expr_terms(expr[-1])
    return []


def expr_anchor(expr: Expr) -> Expr:
    """The innermost part: ("name", n) or ("whose", attribute, value)."""
    while expr[0] in ("who", "attr", "rel", "count"):
        expr = expr[-1]
    return expr


def expr_keys(expr: Expr) -> list[str]:
    """Typed keys of an expression (as the dataset writes them): person:, relation:, date:/job:/hobby:."""
    anchor = expr_anchor(expr)
    keys = [f"relation:{t}" for t in expr_terms(expr)]
    if anchor[0] == "name":
        keys.append(f"person:{anchor[1]}")
    else:
        keys.append(f"{'date' if anchor[1] == 'dob' else anchor[1]}:{anchor[2]}")
    return keys
