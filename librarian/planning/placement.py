"""Where Ray would put a job's actors on a cluster's node types, without starting anything.

A small model of Ray's scheduling and autoscaling: the placement group's
bundles go in order with its strategy (PACK: onto nodes the group already
uses, then any started node, then a new node; SPREAD: onto a node the group
does not use yet if there is one; STRICT_PACK: all on one node; STRICT_SPREAD:
each on its own node), then the actors outside the group one by one. A new
node is of the type Ray's autoscaler would pick for the requests still
pending: one that holds the request, not a GPU type for requests without GPUs
when another type will do, then the one the pending requests would use most
fully (its resource-utilization scorer); never more than a type's (and the
launcher's) `max_workers`. Each GPU is tracked: Ray's (whole or shared fractions) and the
ones a node hides from Ray, which a vLLM actor that asks for no GPU uses. A colocated bundle (`members`: a
learner rank and a rollout worker) is placed as one request; its members then share its GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.planning.cluster_file import Cluster, NodeType


@dataclass
class Actor:
    """One actor of the job: its Ray request and what it runs."""

    name: str
    role: str  # learner | rollout | probe
    cpus: float
    gpus: float
    engine: dict[str, Any] | None = None  # a vLLM engine's backend options
    in_group: bool = False
    node: StartedNode | None = None
    gpu_ids: list[int] = field(default_factory=list)  # physical GPUs it uses on its node
    members: list[Actor] = field(default_factory=list)  # a colocated bundle: the actors that share it


@dataclass
class StartedNode:
    """A started node and what is left of it."""

    type: NodeType
    index: int
    cpus: float
    free: list[float]  # per advertised GPU: the fraction Ray can still hand out
    users: list[list[Actor]]  # per physical GPU: the actors on it

    @property
    def label(self) -> str:
        return f"{self.type.name}#{self.index}"

    def fits(self, cpus: float, gpus: float) -> bool:
        if cpus > self.cpus + 1e-9:
            return False
        if gpus >= 1:
            return sum(1 for f in self.free if f >= 1 - 1e-9) >= int(round(gpus))
        return gpus <= 0 or any(f >= gpus - 1e-9 for f in self.free)

    def take(self, actor: Actor) -> None:
        self.cpus -= actor.cpus
        if actor.gpus >= 1:
            ids = [i for i, f in enumerate(self.free) if f >= 1 - 1e-9][: int(round(actor.gpus))]
        elif actor.gpus > 0:
            ids = [min((i for i, f in enumerate(self.free) if f >= actor.gpus - 1e-9), key=lambda i: self.free[i])]
        else:
            ids = []
        for i in ids:
            self.free[i] -= min(1.0, actor.gpus)
            self.users[i].extend(actor.members or [actor])
        for one in [actor, *actor.members]:
            one.node, one.gpu_ids = self, list(ids)


@dataclass
class Placement:
    """The started nodes, the actors that found no place, and why."""

    nodes: list[StartedNode] = field(default_factory=list)
    unplaced: list[tuple[Actor, str]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.type.name] = out.get(n.type.name, 0) + 1
        return out


class Scheduler:
    """Ray and its autoscaler, reduced to what placement needs."""

    def __init__(self, cluster: Cluster, max_workers: int = 0) -> None:
        self.cluster = cluster
        self.max_workers = max_workers  # the launcher's cap on worker nodes (0: none)
        self.placement = Placement()
        self.start(cluster.head())

    def start(self, kind: NodeType) -> StartedNode:
        index = sum(1 for n in self.placement.nodes if n.type.name == kind.name) + 1
        node = _empty(kind)
        node.index = index
        self.placement.nodes.append(node)
        return node

    def can_start(self, kind: NodeType) -> bool:
        started = self.placement.counts().get(kind.name, 0)
        workers = sum(1 for n in self.placement.nodes if not n.type.head)
        return not kind.head and started < kind.max_nodes and (not self.max_workers or workers < self.max_workers)

    def new_node(self, cpus: float, gpus: float, pending: list[Actor] = ()) -> StartedNode | None:  # type: ignore[assignment]
        """A node of the type the autoscaler would start for this request (and those `pending` after it)."""
        fitting = [k for k in self.cluster.types if self.can_start(k) and _empty(k).fits(cpus, gpus)]
        if not fitting:
            return None
        wanted = [(cpus, gpus)] + [(a.cpus, a.gpus) for a in pending]
        return self.start(max(fitting, key=lambda k: _score(k, wanted)))

    def why_not(self, actor: Actor) -> str:
        """Which node types could have taken `actor`, and what each lacks."""
        reasons = []
        for k in self.cluster.types:
            started = self.placement.counts().get(k.name, 0)
            if k.cpus < actor.cpus or k.gpus < actor.gpus:
                reasons.append(f"{k.name} offers {k.cpus:g} CPU / {k.gpus:g} GPU")
            elif not self.can_start(k):
                cap = "the head" if k.head else f"{started} of max {k.max_nodes} started, all full"
                reasons.append(f"{k.name}: {cap}")
        return "; ".join(reasons)

    def place_one(self, actor: Actor, prefer: list[StartedNode] | None = None, avoid: list[StartedNode] | None = None,
                  pending: list[Actor] = ()) -> bool:  # type: ignore[assignment]
        candidates = (prefer or []) + [n for n in self.placement.nodes if n not in (prefer or [])]
        for node in candidates:
            if avoid and node in avoid:
                continue
            if node.fits(actor.cpus, actor.gpus):
                node.take(actor)
                return True
        node = self.new_node(actor.cpus, actor.gpus, pending)
        if node is None:
            return False
        node.take(actor)
        return True

    def place_group(self, bundles: list[Actor], strategy: str) -> None:
        """The placement group's bundles with `strategy`; all or nothing, as Ray reserves a group."""
        used: list[StartedNode] = []
        if strategy == "STRICT_PACK":
            cpus, gpus = sum(a.cpus for a in bundles), sum(a.gpus for a in bundles)
            node = next((n for n in self.placement.nodes if n.fits(cpus, gpus)), None) or self.new_node(cpus, gpus, [])
            if node is None:
                self._fail(bundles, f"STRICT_PACK needs {cpus:g} CPU / {gpus:g} GPU on one node; no node type has it")
                return
            for a in bundles:
                node.take(a)
            return
        for i, actor in enumerate(bundles):
            rest = bundles[i + 1:]
            if strategy == "PACK":
                ok = self.place_one(actor, prefer=used, pending=rest)
            elif strategy == "SPREAD":
                ok = self.place_one(actor, avoid=used, pending=rest) or self.place_one(actor, prefer=used)
            else:  # STRICT_SPREAD
                ok = self.place_one(actor, avoid=used, pending=rest)
            if not ok:
                self._fail(bundles[i:], self.why_not(actor))
                return
            if actor.node not in used:
                used.append(actor.node)

    def _fail(self, actors: list[Actor], why: str) -> None:
        for a in actors:
            self.placement.unplaced.append((a, why))

    def place_free(self, actors: list[Actor]) -> None:
        for i, actor in enumerate(actors):
            if not self.place_one(actor, pending=actors[i + 1:]):
                self.placement.unplaced.append((actor, self.why_not(actor)))

    def share_hidden_gpus(self, actors: list[Actor]) -> list[str]:
        """Put each placed vLLM actor without a Ray GPU on its node's hidden GPUs; problems for those that have
        none (they would find no GPU of their own)."""
        problems = []
        for actor in actors:
            if actor.engine is None or actor.gpus > 0 or actor.node is None:
                continue
            node = actor.node
            hidden = list(range(int(node.type.gpus), node.type.physical_gpus))
            if not hidden:
                seen = "every GPU there is Ray's, handed to others" if node.type.gpus else "it has no GPU"
                problems.append(f"{actor.name} runs a vLLM engine but asks Ray for no GPU, and landed on "
                                f"{node.label}, where {seen}: give it GPUs (gpus_per_worker) or a node type with "
                                "a GPU hidden from Ray (num-gpus 0)")
                continue
            gpu = min(hidden, key=lambda i: len(node.users[i]))
            node.users[gpu].append(actor)
            actor.gpu_ids = [gpu]
        return problems


def _empty(kind: NodeType) -> StartedNode:
    return StartedNode(kind, 0, kind.cpus, [1.0] * int(kind.gpus), [[] for _ in range(max(kind.physical_gpus,
                                                                                   int(kind.gpus)))])


def _score(kind: NodeType, wanted: list[tuple[float, float]]) -> tuple:
    """Ray's utilization scorer for a fresh node of `kind` given the requests in order: no GPU node for CPU-only
    requests, then the highest smallest utilization, mean utilization, requests fitted."""
    node = _empty(kind)
    fitted = 0
    for cpus, gpus in wanted:
        if not node.fits(cpus, gpus):
            continue
        node.take(Actor("", "", cpus, gpus))
        fitted += 1
    gpu_ok = not (kind.gpus > 0 and all(g <= 0 for _, g in wanted))
    utils = [1 - node.cpus / kind.cpus] if kind.cpus else []
    if kind.gpus:
        utils.append(1 - sum(node.free) / kind.gpus)
    return gpu_ok, min(utils, default=0.0), sum(utils) / max(1, len(utils)), fitted
