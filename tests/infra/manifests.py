"""Checks of the deployment files under infra/: each returns a list of problems (empty: fine).

Kubernetes core objects go through the JSON schemas that `kubernetes-validate`
ships (strict: unknown fields are errors). KubeRay's CRDs have no offline
schema, so their structure is checked here by hand, and the pod templates
inside them through the core `PodTemplate` schema.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate as kv
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.33"
GPU = "nvidia.com/gpu"


def yaml_docs(path: Path) -> list[Any]:
    """All documents of a YAML file (a parse error raises with the file named)."""
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: {exc}") from None


# --- Ray cluster launcher ------------------------------------------------------------------------------------
def launcher_problems(config: dict) -> list[str]:
    """Ray's own schema and config checks (offline), plus what this project's node types need."""
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    problems: list[str] = []
    try:
        jsonschema.validate(config, schema)
        validate_config(prepare_config(copy.deepcopy(config)))
    except (jsonschema.ValidationError, ValueError, RuntimeError) as exc:
        return [f"ray schema: {getattr(exc, 'message', exc)}"]
    types = config.get("available_node_types", {})
    for name in ("learner", "rollout", "probe"):
        if name not in types:
            problems.append(f"node type {name!r} missing")
            continue
        if not any(k.startswith("librarian_") for k in types[name].get("resources", {})):
            problems.append(f"node type {name!r}: no librarian_* custom resource")
    head = types.get(config.get("head_node_type"), {})
    if head.get("resources", {}).get("CPU") != 0:
        problems.append("head node must advertise CPU 0 (the driver only)")
    for name in ("learner", "rollout"):
        if types.get(name, {}).get("resources", {}).get("GPU", 0) < 1:
            problems.append(f"node type {name!r} has no GPU")
    setup = " ".join(config.get("setup_commands", []))
    if not re.search(r"scripts/install_runtime\.sh pip gpu\b", setup):
        problems.append("setup_commands must install the project with the gpu extra (scripts/install_runtime.sh)")
    for name in ("rollout", "probe"):
        cmds = " ".join(types.get(name, {}).get("worker_setup_commands", []))
        if "scripts/vllm_env.sh --gpu" not in cmds:
            problems.append(f"node type {name!r}: worker_setup_commands must build the vLLM env")
    return problems


# --- Kubernetes core objects ---------------------------------------------------------------------------------
def k8s_problems(doc: dict, where: str) -> list[str]:
    """Strict schema validation of one core object."""
    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as exc:
        path = "/".join(str(p) for p in exc.absolute_path)
        return [f"{where} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {exc.message} at {path}"]
    except kv.SchemaNotFoundError as exc:
        return [f"{where}: {exc.message}"]
    return []


def pod_template_problems(template: dict, where: str) -> list[str]:
    """A pod template embedded in a CRD, validated as a core PodTemplate."""
    doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
    return k8s_problems(doc, where)


# --- KubeRay ---------------------------------------------------------------------------------------------------
def _containers(group: dict) -> list[dict]:
    return group.get("template", {}).get("spec", {}).get("containers") or []


def _env_names(container: dict) -> set[str]:
    return {e.get("name") for e in container.get("env") or []}


def raycluster_spec_problems(spec: dict, where: str) -> list[str]:
    """headGroupSpec + workerGroupSpecs (rollout/probe/learner) with images, GPUs, env; pod templates valid."""
    problems: list[str] = []
    head = spec.get("headGroupSpec")
    if not isinstance(head, dict):
        return [f"{where}: spec.headGroupSpec missing"]
    groups = spec.get("workerGroupSpecs")
    if not isinstance(groups, list) or not groups:
        return [f"{where}: spec.workerGroupSpecs missing or empty"]
    if not isinstance(spec.get("rayVersion"), str):
        problems.append(f"{where}: spec.rayVersion must be a string")
    if head.get("rayStartParams", {}).get("num-cpus") != "0":
        problems.append(f"{where}: the head must advertise num-cpus '0'")
    named = {}
    for i, g in enumerate(groups):
        name = g.get("groupName")
        if not name:
            problems.append(f"{where}: workerGroupSpecs[{i}] has no groupName")
            continue
        named[name] = g
        for key in ("replicas", "minReplicas", "maxReplicas"):
            if not isinstance(g.get(key), int):
                problems.append(f"{where}: group {name}: {key} must be an integer")
        if all(isinstance(g.get(k), int) for k in ("replicas", "minReplicas", "maxReplicas")) \
                and not g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]:
            problems.append(f"{where}: group {name}: replicas outside [minReplicas, maxReplicas]")
        for k, v in (g.get("rayStartParams") or {}).items():
            if not isinstance(v, str):
                problems.append(f"{where}: group {name}: rayStartParams.{k} must be a string")
    for name in ("rollout", "probe", "learner"):
        if name not in named:
            problems.append(f"{where}: worker group {name!r} missing")
    for name, group in [("head", head), *named.items()]:
        containers = _containers(group)
        if not containers:
            problems.append(f"{where}: group {name}: template.spec.containers missing")
            continue
        c = containers[0]
        if not c.get("image"):
            problems.append(f"{where}: group {name}: no image")
        missing = {"RAY_AUTH_MODE", "MLFLOW_TRACKING_URI", "LIBRARIAN_ES_PASSWORD"} - _env_names(c)
        if missing:
            problems.append(f"{where}: group {name}: env lacks {sorted(missing)}")
        problems += pod_template_problems(group["template"], f"{where} group {name}")
    for name in ("rollout", "probe", "learner"):
        if name in named:
            c = (_containers(named[name]) or [{}])[0]
            limits = c.get("resources", {}).get("limits", {})
            if str(limits.get(GPU, "0")) in ("0", ""):
                problems.append(f"{where}: GPU group {name} has no {GPU} limit")
    if "rollout" in named and "rollout" not in str((_containers(named["rollout"]) or [{}])[0].get("image")):
        problems.append(f"{where}: group rollout must run the rollout image (vLLM env)")
    return problems


def kuberay_problems(doc: dict, where: str) -> list[str]:
    """A RayCluster or RayJob (apiVersion ray.io/v1) checked by hand."""
    if doc.get("apiVersion") != "ray.io/v1":
        return [f"{where}: apiVersion must be ray.io/v1, got {doc.get('apiVersion')!r}"]
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if not doc.get("metadata", {}).get("name"):
        return [f"{where}: metadata.name missing"]
    if kind == "RayCluster":
        return raycluster_spec_problems(spec, where)
    if kind != "RayJob":
        return [f"{where}: unknown KubeRay kind {kind!r}"]
    problems: list[str] = []
    if not isinstance(spec.get("entrypoint"), str) or not spec["entrypoint"].strip():
        problems.append(f"{where}: RayJob spec.entrypoint missing")
    if "runtimeEnvYAML" in spec:
        env = yaml.safe_load(spec["runtimeEnvYAML"])
        if not isinstance(env, dict):
            problems.append(f"{where}: runtimeEnvYAML must be a YAML mapping")
    has_spec, has_selector = "rayClusterSpec" in spec, "clusterSelector" in spec
    if has_spec == has_selector:
        problems.append(f"{where}: a RayJob needs exactly one of rayClusterSpec, clusterSelector")
    if has_spec:
        if spec.get("shutdownAfterJobFinishes") is not True:
            problems.append(f"{where}: a RayJob with its own cluster should set shutdownAfterJobFinishes: true")
        problems += raycluster_spec_problems(spec["rayClusterSpec"], f"{where} rayClusterSpec")
    if has_selector and "shutdownAfterJobFinishes" in spec:
        problems.append(f"{where}: shutdownAfterJobFinishes does not apply with a clusterSelector")
    return problems


# --- docker compose and Dockerfiles -----------------------------------------------------------------------------
def compose_problems(doc: dict, base: Path) -> list[str]:
    """Services exist; depends_on and named volumes refer to defined ones; build contexts exist."""
    problems: list[str] = []
    services = doc.get("services")
    if not isinstance(services, dict) or not services:
        return ["compose: no services"]
    volumes = set((doc.get("volumes") or {}).keys())
    for name, svc in services.items():
        if not svc.get("image") and not svc.get("build"):
            problems.append(f"service {name}: needs image or build")
        deps = svc.get("depends_on") or []
        for dep in deps if isinstance(deps, list) else deps.keys():
            if dep not in services:
                problems.append(f"service {name}: depends_on unknown service {dep!r}")
        for v in svc.get("volumes") or []:
            source = v.split(":", 1)[0] if isinstance(v, str) else v.get("source", "")
            if source and not source.startswith((".", "/", "~", "$")) and source not in volumes:
                problems.append(f"service {name}: volume {source!r} is not defined under volumes")
        build = svc.get("build")
        if build is not None:
            ctx = base / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = None if isinstance(build, str) else build.get("dockerfile")
            if not ctx.is_dir():
                problems.append(f"service {name}: build context {ctx} missing")
            elif dockerfile and not (ctx / dockerfile).is_file():
                problems.append(f"service {name}: dockerfile {dockerfile} missing")
    return problems


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; comments dropped, continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_problems(path: Path, root: Path = ROOT, context: Path | None = None) -> list[str]:
    """FROM first (after build ARGs); every COPY/ADD source exists in the build context."""
    context = context or root
    instructions = dockerfile_instructions(path.read_text())
    problems: list[str] = []
    first = next((w for w, _ in instructions if w != "ARG"), None)
    if first != "FROM":
        problems.append(f"{path.name}: the first instruction (after ARG) must be FROM, got {first}")
    for word, args in instructions:
        if word not in ("COPY", "ADD"):
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        for src in parts[:-1]:
            if not (context / src).exists():
                problems.append(f"{path.name}: {word} source {src!r} does not exist in {context}")
    return problems
