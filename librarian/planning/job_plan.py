"""Where a job's actors land on a cluster file's node types and whether each GPU's memory holds them, starting
nothing. `librarian plan` (`librarian.pipelines.plan_command`) validates the job's config as its pipeline does and
hands the result here, as plain data with every default filled in.

`place_job(job, cluster)` reads the cluster file's node types (`cluster_file`), places every actor the job starts
(learner ranks, rollout engines with their tensor-parallel size, probe workers; `placement`), and estimates
each GPU's memory (`memory_estimate`, `memory_check`). The report holds where everything lands, the GPUs left idle,
and per GPU the learner's and each vLLM engine's memory, and names every problem: an actor no node can take,
an engine's GPUs not matching its tensor-parallel size, a vLLM actor without a GPU of its own, memory that
does not fit (with only the changes that would make it fit), an image without vLLM, checkpoints without a
shared volume. A colocated layout (`rollout.colocate`) puts learner rank i and rollout worker i in one bundle
on one GPU and budgets them together. A preset that asks for no GPU is a CPU preset: plan says so and places
nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

import librarian
from librarian.cluster.actor_pool import START_TIMEOUT_S
from librarian.cluster.topology import COLOCATED_SHARE, RayConfig
from librarian.config import ConfigError
from librarian.learner.config import LearnerConfig
from librarian.planning.cluster_file import Cluster
from librarian.planning.memory_check import fit, phases_text, problem
from librarian.planning.model_lookup import resolve
from librarian.planning.model_shape import ModelShape
from librarian.planning.placement import Actor, Placement, Scheduler
from librarian.planning.vllm_memory import engine_memory

DEFAULT_CLUSTERS = ("infra/ray/cluster.yaml", "infra/kuberay/raycluster.yaml")
ASSUMED = {"learner": "qwen2.5-7b", "rollout": "qwen2.5-7b", "probe": "qwen2.5-1.5b"}  # when the model folder is not on this machine


@dataclass
class Report:
    """One job on one cluster: the lines to print, warnings, problems (any problem: exit 2)."""

    cluster: str
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    idle_gpus: int = 0
    used_gpus: int = 0
    nodes: dict[str, int] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    cpu_preset: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


def default_clusters() -> list[str]:
    """The shipped cluster files: under the current folder, else in this source tree."""
    for root in (Path.cwd(), Path(librarian.__file__).resolve().parents[1]):
        found = [str(root / c) if root != Path.cwd() else c for c in DEFAULT_CLUSTERS if (root / c).is_file()]
        if found:
            return found
    return []


# --- the job ---------------------------------------------------------------------------------------------
def _section(cls: type, data: dict[str, Any] | None) -> Any:
    """`cls` (a config dataclass) from a section, its own fields only, validated as the pipelines do."""
    known = {k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__}
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), known))


def _workers(section: dict[str, Any], role: str, default_workers: int) -> tuple[int, float, float, dict | None]:
    """(workers, CPUs, GPUs per worker, vLLM options or None) of a rollout or probe section."""
    options = dict(section.get("options") or {})
    engine = options if section.get("backend") == "vllm" else None
    cpus = float(section.get("cpus_per_worker", 1.0)) if role == "rollout" else 1.0
    return int(section.get("workers", default_workers)), cpus, float(section.get("gpus_per_worker", 0.0)), engine


def actors(job: dict[str, Any]) -> tuple[list[Actor], list[Actor], Any, Any]:
    """(placement-group bundles in order, free actors, the RayConfig, the LearnerConfig) of an RL job; a colocated
    bundle's actors are its `members`."""
    ray = _section(RayConfig, job.get("ray"))
    learner = _section(LearnerConfig, job.get("learner"))
    n, cpus, gpus, engine = _workers(job.get("rollout") or {}, "rollout", 2)
    share = COLOCATED_SHARE if colocated(job) else 1.0
    ranks = [Actor(f"learner rank {r}", "learner", ray.learner_cpus, ray.learner_gpus * share, in_group=True)
             for r in range(learner.workers)]
    rollouts = [Actor(f"rollout worker {i}", "rollout", cpus, gpus * share, engine, in_group=True) for i in range(n)]
    probes = []
    if "probe" in job:  # only a config with a probe section starts a probe pool
        m, _, pgpus, pengine = _workers(job["probe"] or {}, "probe", 1)
        probes = [Actor(f"probe worker {i}", "probe", 1.0, pgpus, pengine) for i in range(m)]
    if not ray.placement_group:
        for a in ranks + rollouts:
            a.in_group = False
        return [], ranks + rollouts + probes, ray, learner
    if share != 1.0:  # bundle i: learner rank i and rollout worker i on one GPU
        pairs = [Actor(f"bundle {i} (learner rank {i} + rollout worker {i})", "bundle", r.cpus + w.cpus,
                       ray.learner_gpus, in_group=True, members=[r, w])
                 for i, (r, w) in enumerate(zip(ranks, rollouts, strict=True))]
        return pairs, probes, ray, learner
    return [ranks[0], *rollouts, *ranks[1:]], probes, ray, learner


def colocated(job: dict[str, Any]) -> bool:
    return bool((job.get("rollout") or {}).get("colocate"))


def members(actors_: list[Actor]) -> list[Actor]:
    """The actors themselves: a colocated bundle's members in its place."""
    return [m for a in actors_ for m in (a.members or [a])]


def is_cpu_preset(job: dict[str, Any]) -> bool:
    """No actor asks for a GPU, no vLLM engine, a CPU learner: a preset for one machine."""
    if not ("rollout" in job or "learner" in job):
        return True
    bundles, free, ray, learner = actors(job)
    everyone = members(bundles) + free
    return not any(a.gpus > 0 or a.engine is not None for a in everyone) and not str(learner.device).startswith("cuda")


# --- checks ----------------------------------------------------------------------------------------------
def _model(actor_role: str, options: dict[str, Any], given: str) -> tuple[ModelShape, str]:
    if given:
        return resolve(given)
    name = str(options.get("model", ""))
    if name and (Path(name) / "config.json").is_file():
        return resolve(name)
    try:
        return resolve(name)
    except ConfigError:
        shape, _ = resolve(ASSUMED[actor_role])
        return shape, f"assumed: {name or 'the model'} is not on this machine (--{_flag(actor_role)} to change)"


def _flag(role: str) -> str:
    return "policy" if role in ("rollout", "learner") else "answerer"


def check_engines(report: Report, everyone: list[Actor]) -> None:
    """Each vLLM engine: its GPUs match its parallel size, it runs in the rollout image, its memory fits."""
    for actor in everyone:
        if actor.engine is None or actor.node is None:
            continue
        kwargs = actor.engine.get("engine_kwargs") or {}
        world = int(kwargs.get("tensor_parallel_size", 1)) * int(kwargs.get("pipeline_parallel_size", 1))
        section = f"{actor.role}.gpus_per_worker"
        if actor.gpus >= 1 and world != int(round(actor.gpus)):
            report.problems.append(f"{actor.name}: tensor_parallel_size x pipeline_parallel_size = {world} but "
                                   f"{section} = {actor.gpus:g}: set them equal")
        elif actor.gpus < 1 and world > 1:
            report.problems.append(f"{actor.name}: an engine over {world} GPUs needs {section} = {world}")
        if actor.node.type.image_kind != "rollout":
            report.problems.append(f"{actor.name} runs vLLM on {actor.node.label}, whose image "
                                   f"({actor.node.type.image or 'none'}) has no vLLM environment; only the rollout "
                                   "image does")
        if actor.engine.get("mode") == "inprocess":
            report.problems.append(f"{actor.name}: mode 'inprocess' needs vLLM in the actor's own interpreter; the "
                                   "rollout image runs actors in /opt/venv (no vLLM): use mode 'subprocess'")


def check_gpu_memory(report: Report, placement: Placement, learner: Any, models: dict[str, tuple],
                     max_len: int, shared: bool = False) -> None:
    """Every used GPU: the engines' shares add up to at most 1, and each occupant's estimate fits; with `shared`
    (rollout.colocate) a learner rank and its engine are budgeted together (`memory_check.fit`)."""
    shown: set[str] = set()
    for node in placement.nodes:
        for gpu, users in enumerate(node.users):
            if not users:
                continue
            where = f"{node.label} GPU {gpu}"
            engines = [a for a in users if a.engine is not None]
            share = sum(float((a.engine.get("engine_kwargs") or {}).get("gpu_memory_utilization", 0.9))
                        for a in engines)
            if len(engines) > 1 and share > 1.0 + 1e-9:
                report.problems.append(f"{where}: {len(engines)} vLLM engines share it with gpu_memory_utilization "
                                       f"adding up to {share:.2f} > 1")
            learners = [a for a in users if a.role == "learner"]
            if learners and engines and not shared:
                report.problems.append(f"{where}: a learner rank and a vLLM engine share one GPU; set "
                                       "rollout.colocate=true to time-share it (the engine sleeps while the learner "
                                       "updates), or give each its own GPU")
            mib = node.type.gpu_mib
            if not mib:
                unknown = (f"the GPU memory of node type {node.type.name} is unknown: give it an instance type or "
                           "an nvidia.com/gpu.product node selector plan knows, or pass --gpu-memory GiB")
                if unknown not in report.problems:
                    report.problems.append(unknown)
                continue
            partner = engines[0] if shared and learners and len(engines) == 1 else None
            for actor in users:
                key = f"{actor.role}@{node.type.name}"
                if actor.role == "learner":
                    _learner_memory(report, actor, where, key not in shown, models["learner"][0], learner, max_len,
                                    mib, partner)
                elif actor.engine is not None:
                    est = engine_memory(models[actor.role][0], actor.engine, mib)
                    if key not in shown:
                        report.memory[key] = {**asdict(est), "kv_space": est.kv_space, "kv_tokens": est.kv_tokens,
                                              "full_sequences": est.full_sequences, "gpu_gib": mib / 1024}
                    if est.full_sequences < 1 and actor is not partner:  # a partner's is in the learner's problem
                        report.problems.append(
                            f"{actor.name} on {where}: at gpu_memory_utilization {est.budget * 1024 / mib:.2f} the "
                            f"engine has {est.budget:.1f} GiB; weights {est.weights:.1f}, LoRA {est.lora:.1f}, "
                            f"activations and runtime {est.activations + est.runtime:.1f} leave {est.kv_space:.1f} GiB "
                            f"of KV cache = {est.kv_tokens} tokens < max_model_len {est.max_model_len}")
                shown.add(key)


def _learner_memory(report: Report, actor: Actor, where: str, show: bool, shape: ModelShape, learner: Any,
                    max_len: int, mib: int, partner: Actor | None) -> None:
    """One learner rank's verdict on its GPU (with its colocated engine's share when `partner` is one)."""
    verdict = fit(shape, learner, max_len, mib / 1024, partner.engine if partner else None)
    est = verdict.learner
    if show:
        report.memory[f"learner@{actor.node.type.name}"] = {**asdict(est), "total": est.total,
                                                            "resident": est.resident, "gpu_gib": mib / 1024}
        if partner is not None and verdict.engine is not None:
            report.memory[f"colocated@{actor.node.type.name}"] = {
                "sampling": verdict.sampling, "updating": verdict.updating, "engine_share": verdict.engine.budget,
                "learner_resident": est.resident, "learner_peak": est.total, "gpu_gib": mib / 1024}
    text = problem(verdict, shape, learner, max_len, partner.engine if partner else None)
    if text:
        report.problems.append(f"{actor.name} on {where}: {text}")


def check_storage(report: Report, job: dict[str, Any], placement: Placement, everyone: list[Actor],
                  learner: Any) -> None:
    """Checkpoints and results go to out_dir: with the learner on other nodes than the driver (the head) it must
    be a volume they all mount (a learner group writes one checkpoint folder from every rank)."""
    head = placement.nodes[0]
    hosts = [a.node for a in everyone if a.role == "learner" and a.node is not None] + [head]
    if len({id(n) for n in hosts}) < 2:
        return
    types = {n.type.name: n.type for n in hosts}
    missing = sorted(name for name, t in types.items() if not t.shared)
    if missing:
        message = (f"node types {missing} mount no shared volume: checkpoints the learner writes on its node are "
                   "not there for the driver" + (" or the other ranks" if learner.workers > 1 else ""))
        (report.problems if learner.workers > 1 else report.warnings).append(message)
        return
    mounts = sorted(set.intersection(*[set(t.shared) for t in types.values()]))
    if not mounts:
        report.problems.append(f"node types {sorted(types)} share no volume path; mount one path on all of them")
        return
    out_dir = str(job.get("out_dir", "") or "")
    if not any(out_dir == m or out_dir.startswith(m.rstrip("/") + "/") for m in mounts):
        report.warnings.append(f"out_dir={out_dir or '(the default)'} is not on the volume the learner nodes and the "
                               f"head share ({', '.join(mounts)}): submit with out_dir={mounts[0]}/NAME")


def _start_timeout(job: dict[str, Any], role: str) -> float:
    return float((job.get(role) or {}).get("start_timeout_s", START_TIMEOUT_S))


# --- the plan --------------------------------------------------------------------------------------------
def place_job(job: dict[str, Any], cluster: Cluster, policy: str = "", answerer: str = "") -> Report:
    """Place `job` (a merged config) onto `cluster` and check it; starts nothing."""
    report = Report(cluster.path)
    if is_cpu_preset(job):
        report.cpu_preset = True
        report.lines.append("a CPU preset: no actor asks for a GPU (and no vLLM engine, no CUDA learner); it runs on "
                            "one machine (ray.address '') and is not placed onto a GPU cluster")
        return report
    bundles, free, ray, learner = actors(job)
    everyone = members(bundles) + free
    roles = {"learner": policy, "rollout": policy, "probe": answerer}
    rollout_options = dict((job.get("rollout") or {}).get("options") or {})
    models = {"learner": _model("learner", rollout_options, policy)}
    for actor in everyone:
        if actor.engine is not None and actor.role not in models:
            models[actor.role] = _model(actor.role, actor.engine, roles[actor.role])
    for role, (shape, source) in models.items():
        report.lines.append(f"model ({role}): {shape.name}, {shape.params / 1e9:.2f}B parameters ({source})")
    if str(learner.device).startswith("cuda") and ray.learner_gpus <= 0:
        report.problems.append("learner.device is cuda but ray.learner_gpus is 0: the learner would find no GPU")
    scheduler = Scheduler(cluster, _max_workers(cluster))
    if bundles:
        scheduler.place_group(bundles, ray.strategy)
    scheduler.place_free(free)
    placement = scheduler.placement
    report.problems += scheduler.share_hidden_gpus(everyone)
    for actor, why in placement.unplaced:
        held = (f" (the placement group waits, then TopologyError after ray.reserve_timeout_s = "
                f"{ray.reserve_timeout_s:g} s)" if actor.in_group else
                f" (the pool waits, then fails after {actor.role}.start_timeout_s = {_start_timeout(job, actor.role):g} s)"
                if actor.role in ("rollout", "probe") else " (Ray waits for it)")
        report.problems.append(f"{actor.name} ({actor.cpus:g} CPU, {actor.gpus:g} GPU) cannot be placed{held}: {why}")
    for actor in everyone:
        if actor.node is not None:
            gpus = f" GPU {','.join(map(str, actor.gpu_ids))}" if actor.gpu_ids else ""
            report.lines.append(f"  {actor.name:<18} {actor.cpus:>4g} CPU {actor.gpus:>4g} GPU -> {actor.node.label}{gpus}")
    if str(learner.device).startswith("cuda"):
        for a in everyone:
            if a.role == "learner" and a.node is not None and a.node.type.image_kind not in ("trainer", "rollout"):
                report.problems.append(f"{a.name} landed on {a.node.label}, whose image has no CUDA DeepSpeed "
                                       "(the trainer or rollout image does)")
    check_engines(report, everyone)
    max_len = int(rollout_options.get("max_model_len", 2048))
    check_gpu_memory(report, placement, learner, models, max_len, shared=colocated(job))
    check_weight_transfer(report, everyone, learner, rollout_options)
    check_storage(report, job, placement, everyone, learner)
    report.nodes = placement.counts()
    report.used_gpus = sum(1 for n in placement.nodes for u in n.users if u)
    report.idle_gpus = sum(1 for n in placement.nodes for u in n.users if not u)
    if report.idle_gpus:
        idle = sorted({n.label for n in placement.nodes for u in n.users if not u})
        report.warnings.append(f"{report.idle_gpus} of {report.used_gpus + report.idle_gpus} GPUs on the started "
                               f"nodes stay idle ({', '.join(idle)})")
    return report


def check_weight_transfer(report: Report, everyone: list[Actor], learner: Any, options: dict[str, Any]) -> None:
    """CUDA IPC handles open only on the GPU that made them: each engine must share learner rank 0's GPU."""
    if learner.lora.enabled or options.get("weight_transfer") != "ipc":
        return
    rank0 = next((a for a in everyone if a.name == "learner rank 0" and a.node is not None), None)
    if rank0 is None:
        return
    for a in everyone:
        if a.role == "rollout" and a.node is not None and (a.node, a.gpu_ids) != (rank0.node, rank0.gpu_ids):
            report.problems.append(f"{a.name}: weight_transfer 'ipc' needs the learner on its GPU, but learner rank "
                                   f"0 is on {rank0.node.label} GPU {rank0.gpu_ids} and it on {a.node.label} GPU "
                                   f"{a.gpu_ids}; colocate them (rollout.colocate) or use 'nccl'")
            return


def _max_workers(cluster: Cluster) -> int:
    if cluster.kind != "launcher":
        return 0

    return int((yaml.safe_load(Path(cluster.path).read_text()) or {}).get("max_workers", 0))


def render(report: Report, title: str) -> str:
    out = [f"plan: {title} onto {report.cluster}"]
    out += report.lines
    if not report.cpu_preset:
        nodes = ", ".join(f"{k} x{v}" for k, v in report.nodes.items())
        out.append(f"nodes: {nodes}; GPUs: {report.used_gpus} used, {report.idle_gpus} idle")
        for key, m in report.memory.items():
            if "kv_tokens" in m:
                out.append(f"  {key} (per GPU): budget {m['budget']:.1f} of {m['gpu_gib']:.1f} GiB = weights "
                           f"{m['weights']:.1f} + LoRA {m['lora']:.1f} + activations {m['activations']:.1f} + runtime "
                           f"{m['runtime']:.1f} + KV {m['kv_space']:.1f} ({m['kv_tokens']} tokens, "
                           f"{m['full_sequences']:.1f} x max_model_len)")
            elif "sampling" in m:
                out.append(f"  {key} (one GPU, shared): {max(m['sampling'], m['updating']):.1f} of "
                           f"{m['gpu_gib']:.1f} GiB; sampling: learner {m['learner_resident']:.1f} + engine share "
                           f"{m['engine_share']:.1f} = {m['sampling']:.1f}; updating: learner {m['learner_peak']:.1f} "
                           f"+ sleeping engine = {m['updating']:.1f}")
            else:
                out.append(f"  {key} (per GPU): {m['total']:.1f} of {m['gpu_gib']:.1f} GiB = weights {m['weights']:.1f}"
                           f" + gradients {m['gradients']:.1f} + optimizer {m['optimizer']:.1f} + reference "
                           f"{m['reference']:.1f} + runtime {m['runtime']:.1f} + "
                           f"{phases_text(m['phases'], m['micro_batch_tokens'])}")
    out += [f"warning: {w}" for w in report.warnings]
    out += [f"problem: {p}" for p in report.problems]
    out.append("result: " + ("CPU preset" if report.cpu_preset else "fits" if report.ok else
                             f"does not fit ({len(report.problems)} problem(s))"))
    return "\n".join(out)
