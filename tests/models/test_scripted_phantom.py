"""PhantomWiki's question grammar, fact sentences and kinship terms, as the scripted policies read them."""

from __future__ import annotations

import random

import pytest

from librarian.models.scripted.kbgym import Event, SearchHit
from librarian.models.scripted.phantom import (
    KIN,
    PhantomFact,
    canonical,
    expr_keys,
    is_phantom_question,
    parse_facts,
    parse_question,
    plural,
    surface,
)
from librarian.models.scripted.phantom_reader import (
    PhantomKnowledge,
    answer_for,
    index_text,
    parse_index,
    query_anchor,
)

TERMS = sorted(t for t in KIN if t != "spouse")
ATTRS = {"date of birth": "dob", "occupation": "job", "hobby": "hobby"}


def _chain(rng: random.Random, depth: int) -> tuple[str, tuple]:
    """A random "R" of the grammar with `depth` relations, and the expression it should parse to."""
    if rng.random() < 0.5:
        name = rng.choice(["Ann Lee", "Bo Day", "Vicki Hackworth"])
        text, expr = name, ("name", name)
    else:
        noun = rng.choice(sorted(ATTRS))
        value = rng.choice(["sound technician", "0254-07-10", "tennis polo"])
        text, expr = f"the person whose {noun} is {value}", ("whose", ATTRS[noun], value)
    for _ in range(depth):
        term = rng.choice(TERMS)
        text, expr = f"the {surface(term)} of {text}", ("rel", term, expr)
    return text, expr


@pytest.mark.parametrize("seed", range(30))
def test_the_recursive_grammar_parses_at_any_depth(seed):
    rng = random.Random(seed)
    depth = rng.randint(1, 6)
    text, expr = _chain(rng, depth)
    if expr[0] == "name":  # "Who is <name>?" is not in the grammar; wrap one relation
        text, expr = f"the friend of {text}", ("rel", "friend", expr)
    assert parse_question(f"Who is {text}?") == ("who", expr)
    noun = rng.choice(sorted(ATTRS))
    if expr[0] != "name":
        assert parse_question(f"What is the {noun} of {text}?") == ("attr", ATTRS[noun], expr)
    term = rng.choice(TERMS)
    assert parse_question(f"How many {plural(term)} does {text} have?") == ("count", term, expr)
    assert is_phantom_question(f"How many {plural(term)} does {text} have?")


def test_words_of_the_grammar():
    assert parse_question("What is the date of birth of the person whose date of birth is 0254-07-10?") == \
        ("attr", "dob", ("whose", "dob", "0254-07-10"))
    assert parse_question("How many female first cousins once removed does Ann Lee have?") == \
        ("count", "female_first_cousin_once_removed", ("name", "Ann Lee"))
    assert parse_question("How many sisters-in-law does the great-aunt of Bo Day have ?") == \
        ("count", "sister_in_law", ("rel", "great_aunt", ("name", "Bo Day")))
    assert expr_keys(parse_question("Who is the niece of the person whose hobby is judo?")) == \
        ["relation:niece", "hobby:judo"]
    for term in KIN:
        assert canonical(surface(term)) == term and canonical(plural(term)) == term
    # KBGym wording and other text is not this grammar
    for text in ("Who is Ada Moss's mother?", "What is Ada Moss's job?", "Who is the mayor of Port Avel?",
                 "How many people live in Port Avel?", "Tell me about Ann."):
        assert not is_phantom_question(text)


def test_fact_sentences_singular_lists_attributes_and_citations():
    assert parse_facts("The mother of Aida Wang is Shelli Beltran.") == [PhantomFact("Aida Wang", "mother", "Shelli Beltran")]
    assert parse_facts("The friends of Aida Wang are Ryan Wang, Bert Deluna.") == \
        [PhantomFact("Aida Wang", "friend", "Ryan Wang"), PhantomFact("Aida Wang", "friend", "Bert Deluna")]
    assert parse_facts("facts/pw00012: The date of birth of Aida Wang is 0295-05-30.") == \
        [PhantomFact("Aida Wang", "dob", "0295-05-30")]
    assert parse_facts("The occupation of A B is further education lecturer.") == \
        [PhantomFact("A B", "job", "further education lecturer")]
    assert parse_facts("The sisters-in-law of A B are C D, E F.")[1] == PhantomFact("A B", "sister_in_law", "E F")
    assert parse_facts("Aida Wang") == [] and parse_facts("Index grandmother_of_x") == []


FAMILY = """
The father of Kid One is Dad One. The mother of Kid One is Mum One.
The father of Kid Two is Dad One. The mother of Kid Two is Mum One.
The father of Dad One is Grandpa One. The mother of Dad One is Granny One.
The father of Uncle One is Grandpa One. The mother of Uncle One is Granny One.
The father of Aunt One is Grandpa One. The mother of Aunt One is Granny One.
The son of Dad One is Kid One. The daughter of Dad One is Kid Two.
The son of Mum One is Kid One. The daughter of Mum One is Kid Two.
The son of Grandpa One is Dad One. The son of Grandpa One is Uncle One. The daughter of Grandpa One is Aunt One.
The son of Granny One is Dad One. The son of Granny One is Uncle One. The daughter of Granny One is Aunt One.
The brother of Dad One is Uncle One. The sister of Dad One is Aunt One. The brother of Uncle One is Dad One.
The sister of Uncle One is Aunt One. The brother of Aunt One is Dad One. The brother of Aunt One is Uncle One.
The sister of Kid One is Kid Two. The brother of Kid Two is Kid One.
The wife of Dad One is Mum One. The husband of Mum One is Dad One.
The wife of Uncle One is Inlaw One. The husband of Inlaw One is Uncle One.
The father of Cousin One is Uncle One. The mother of Cousin One is Inlaw One.
The daughter of Uncle One is Cousin One. The daughter of Inlaw One is Cousin One.
The friend of Kid One is Pal One. The friend of Pal One is Kid One.
The hobby of Kid One is chess. The hobby of Cousin One is chess. The occupation of Aunt One is baker.
"""


@pytest.fixture(scope="module")
def family():
    hits = tuple(SearchHit(f"d{i}", "raw", f"d{i}", line) for i, line in enumerate(
        s.strip() + "." for s in FAMILY.replace("\n", " ").split(". ") if s.strip()))
    return PhantomKnowledge([Event("search", {"query": "all", "page": 1}, "", hits=hits)], final=True)


@pytest.mark.parametrize(("question", "answer"), [
    ("Who is the aunt of Kid One?", "Aunt One"),
    ("Who is the uncle of Kid Two?", "Uncle One"),
    ("Who is the cousin of Kid One?", "Cousin One"),
    ("Who is the female cousin of Kid One?", "Cousin One"),
    ("How many male cousins does Kid One have?", "0"),
    ("Who is the grandmother of the person whose hobby is chess?", "Granny One"),
    ("Who is the niece of Dad One?", "Cousin One"),
    ("Who is the nephew of Aunt One?", "Kid One"),
    ("Who is the sister-in-law of Mum One?", "Aunt One"),
    ("Who is the father-in-law of Inlaw One?", "Grandpa One"),
    ("Who is the daughter-in-law of Granny One?", "Inlaw One, Mum One"),
    ("What is the occupation of the aunt of the friend of Pal One?", "baker"),
    ("How many grandchildren does Grandpa One have?", "3"),
    ("How many sisters does the person whose hobby is chess have?", "0, 1"),
    ("Who is the grandchild of the grandparent of Cousin One?", "Cousin One, Kid One, Kid Two"),
])
def test_kinship_terms_follow_the_generator_definitions(family, question, answer):
    assert answer_for(question, family) == answer


def test_relation_index_text_is_its_key_and_reads_back():
    text = index_text("great_grandmother", "Vicki Hackworth")
    assert text == "Index great_grandmother_of_vicki_hackworth"
    assert parse_index(text) == "great_grandmother_of_vicki_hackworth"
    assert parse_index("Index godmother_of_vicki_hackworth") is None  # not a kinship term
    assert parse_index("Vicki Hackworth") is None and parse_index("The mother of A B is C D.") is None
    assert query_anchor("The mother and father of Vicki (key grandmother_of_vicki_hackworth)") == ("person", "Vicki")
    assert query_anchor("whose hobby is tennis polo") == ("value", "tennis polo")
