"""Coverage readings and index quality on a real (small) KBGym universe and workspace."""

import pytest

from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.datasets.kbgym.facts import Fact
from librarian.datasets.records import to_documents
from librarian.evaluation.metrics import (
    coverage_readings,
    index_quality,
    question_coverage,
    structure_table,
    verified_coverage,
)
from librarian.evaluation.metrics.index_quality import AuthoredIndex
from librarian.evaluation.metrics.kbgym_index import KBGymKeys, kbgym_index_records
from librarian.evaluation.metrics.structure import headline
from librarian.workspace import Add, Workspace


@pytest.fixture(scope="module")
def kb():
    return build_kbgym(people=60, seed=1, sizes=SplitSizes(train=10, test_in=0, test_out=0, eval_in=0, eval_out=0))


@pytest.fixture(scope="module")
def world(kb):
    """A KBGym store with hand-built indexes of every kind, and what each should score."""
    u = kb.universe
    ws = Workspace.from_documents(to_documents(kb.corpus), raw_policy="editable")
    doc = lambda rel, s, o: kb.index[Fact(rel, s, o)]  # noqa: E731
    people = list(u.people.values())
    city = "Glimmerford"
    residents = sorted(p.pid for p in people if p.city == city)
    anchor = next(p for p in people if len(p.friends) >= 2 and any(u.people[c].children for c in p.children))
    grandkids = sorted({g for c in anchor.children for g in u.people[c].children})
    outsider = next(p for p in people if p.city != city and p.pid not in anchor.friends and p.pid != anchor.pid)
    ids = {}

    def add(name, text, links):
        ids[name] = ws.apply(Add(text=text, links=tuple(links))).created[0]

    add("city_full", f"Residents of {city}", [doc("city", p, city) for p in residents])
    add("city_part", f"People living in {city}",
        [doc("city", p, city) for p in residents[:3]] + [doc("job", outsider.pid, outsider.job)])
    add("friends", f"Friends of {anchor.name}", [doc("friend", anchor.pid, f) for f in anchor.friends])
    add("grandkids", f"Grandchildren of {anchor.name}", [doc("job", g, u.people[g].job) for g in grandkids])
    add("hub", anchor.name, [doc("job", anchor.pid, anchor.job), doc("job", outsider.pid, outsider.job)])
    add("empty", "Residents of Oxbarrow", [])
    member = u.people[residents[0]]
    add("materialized", f"{member.name} lives in {city}", [doc("city", member.pid, city)])
    add("join", f"{outsider.job}s living in {outsider.city}", [doc("job", outsider.pid, outsider.job)])
    add("index_to_index", f"Everything about {city}", [ids["city_full"]])
    return {"ws": ws, "ids": ids, "residents": residents, "anchor": anchor, "grandkids": grandkids,
            "outsider": outsider, "doc": doc, "city": city}


def test_keys_resolve_by_kind(kb, world):
    keys = KBGymKeys(kb.universe)
    anchor = world["anchor"]
    assert keys.resolve("Residents of Glimmerford").kind == "attribute:city"
    assert keys.resolve(f"People whose job is {anchor.job}").kind == "attribute:job"
    assert keys.resolve(f"{anchor.hobby} fans").kind == "attribute:hobby"
    friends = keys.resolve(f"Friends of {anchor.name}")
    assert friends.kind == "relation:1hop" and friends.members == frozenset(anchor.friends)
    grand = keys.resolve(f"{anchor.name}'s grandchildren")
    assert grand.kind == "relation:2hop" and grand.members == frozenset(world["grandkids"])
    assert keys.resolve(anchor.name).kind == "hub"
    assert keys.resolve("Glimmerford and Oxbarrow") is None
    assert keys.resolve("nothing in particular") is None


def test_index_records_score_links_against_the_universe(kb, world):
    recs = {r.node_id: r for r in kbgym_index_records(world["ws"], kb.universe)}
    ids, residents = world["ids"], world["residents"]
    full = recs[ids["city_full"]]
    assert (full.kind, full.status, full.correct_links, full.scored_links) == ("attribute:city", "index",
                                                                               len(residents), len(residents))
    assert full.members_hit == full.members == len(residents)
    part = recs[ids["city_part"]]
    assert (part.correct_links, part.scored_links, part.members_hit) == (3, 4, 3)
    friends = recs[ids["friends"]]
    assert friends.kind == "relation:1hop" and friends.correct_links == friends.scored_links
    assert friends.members_hit == len(world["anchor"].friends)
    grand = recs[ids["grandkids"]]
    assert grand.kind == "relation:2hop" and grand.correct_links == len(world["grandkids"])
    hub = recs[ids["hub"]]
    own = sum(1 for n in world["ws"] if n.kind == "raw" and n.origin.split(":")[1] == world["anchor"].pid)
    assert (hub.kind, hub.correct_links, hub.scored_links, hub.members, hub.members_hit) == ("hub", 1, 2, own, 1)
    assert recs[ids["empty"]].status == "empty"
    assert recs[ids["materialized"]].status == "materialized"
    assert recs[ids["join"]].status == "unresolved"
    assert recs[ids["index_to_index"]].scored_links == 0  # links to other indexes are not judged


def test_index_quality_table(kb, world):
    recs = kbgym_index_records(world["ws"], kb.universe)
    table = index_quality(recs)
    rows = {r.kind: r for r in table.rows}
    n_res = len(world["residents"])
    city = rows["attribute:city"]
    # city_full, city_part, materialized and index_to_index resolve to the city key
    assert city.n == 4
    assert city.precision == pytest.approx((n_res + 3 + 1) / (n_res + 4 + 1))
    assert table.counts == {"index": 6, "materialized": 1, "empty": 1, "unresolved": 1}
    assert table.overall.n == 7
    assert 0 < table.overall.precision < 1 and 0 < table.overall.recall <= 1


def test_verified_and_question_coverage(kb, world):
    ws, doc, residents = world["ws"], world["doc"], world["residents"]
    recs = kbgym_index_records(ws, kb.universe)
    raw_total = sum(1 for n in ws if n.kind == "raw")
    verified = verified_coverage(recs, raw_total)
    readings = coverage_readings(ws, verified=verified)
    assert 0 < verified <= readings.one_hop <= readings.two_hop <= 1
    outsider = world["outsider"]
    covered = [doc("city", p, world["city"]) for p in residents[:2]]
    uncovered = [doc("birthdate", outsider.pid, outsider.birthdate.isoformat())]
    assert question_coverage(ws, [covered, uncovered]) == 0.5
    split = [doc("city", residents[0], world["city"]), doc("friend", world["anchor"].pid, world["anchor"].friends[0])]
    assert question_coverage(ws, [split]) == 1.0
    assert question_coverage(ws, [split], single_index=True) == 0.0
    with pytest.raises(ValueError, match="non-empty support"):
        question_coverage(ws, [[]])


def test_flat_store_has_no_coverage(kb):
    flat = Workspace.from_documents(to_documents(kb.corpus), raw_policy="editable")
    readings = coverage_readings(flat, supports=[q.support for q in kb.bundle.questions])
    assert readings.as_dict() == {"one_hop": 0.0, "two_hop": 0.0, "verified": None, "questions": 0.0}
    assert index_quality(kbgym_index_records(flat, kb.universe)).overall is None


def test_structure_table(kb, world):
    flat = Workspace.from_documents(to_documents(kb.corpus), raw_policy="editable")
    table = structure_table({"flat": flat, "curated": world["ws"]})
    assert headline(table["flat"])["synthetic"] == 0
    assert headline(table["curated"])["synthetic"] == len(world["ids"])
    assert headline(table["curated"])["empty_indexes"] == 1
    with pytest.raises(ValueError, match="at least one"):
        structure_table({})


def test_index_record_validation():
    with pytest.raises(ValueError, match="correct"):
        AuthoredIndex("x", "hub", "", "index", degree=1, scored_links=1, correct_links=2)
    with pytest.raises(ValueError, match="status"):
        AuthoredIndex("x", "hub", "", "great", degree=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="raw_total"):
        verified_coverage([], 0)
