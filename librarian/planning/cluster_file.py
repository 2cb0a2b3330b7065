"""What a cluster file declares, as node types: the Ray cluster launcher's YAML and KubeRay's RayCluster/RayJob.

For each node type (a launcher `available_node_types` entry, a KubeRay head
or worker group): the CPUs, GPUs and custom resources it advertises to Ray,
the GPUs the machine really has (a GPU Ray does not see can still serve an
actor that asks for none), each GPU's memory, how many such nodes may exist,
the image, and the container paths that are shared volumes.

Physical GPUs and their memory come from the AWS instance type (launcher) or
the pod's GPU limit and its `nvidia.com/gpu.product` node selector (KubeRay,
the label NVIDIA's GPU feature discovery puts on nodes); `gpu_memory_gib`
overrides both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from librarian.config import ConfigError

# GPU model -> memory (MiB, as nvidia-smi reports it)
GPU_MIB = {"L40S": 46068, "L4": 23034, "A10G": 23028, "T4": 15360, "A100-40GB": 40960, "A100-80GB": 81920,
           "H100-80GB": 81559, "H200": 143771}
# AWS GPU instance families: model, {size: (vCPUs, GPUs)}
_SIZES = {"xlarge": (4, 1), "2xlarge": (8, 1), "4xlarge": (16, 1), "8xlarge": (32, 1), "12xlarge": (48, 4),
          "16xlarge": (64, 1), "24xlarge": (96, 4), "48xlarge": (192, 8)}
AWS_GPU = {"g6e": "L40S", "g6": "L4", "g5": "A10G", "g4dn": "T4"}
AWS_P = {"p4d.24xlarge": (96, 8, "A100-40GB"), "p4de.24xlarge": (96, 8, "A100-80GB"),
         "p5.48xlarge": (192, 8, "H100-80GB"), "p5e.48xlarge": (192, 8, "H200"), "p5en.48xlarge": (192, 8, "H200")}
# NVIDIA GPU feature discovery's product label -> model
GFD_PRODUCT = {"NVIDIA-L40S": "L40S", "NVIDIA-L4": "L4", "NVIDIA-A10G": "A10G", "Tesla-T4": "T4",
               "NVIDIA-A100-SXM4-40GB": "A100-40GB", "NVIDIA-A100-SXM4-80GB": "A100-80GB",
               "NVIDIA-H100-80GB-HBM3": "H100-80GB", "NVIDIA-H200": "H200"}


@dataclass(frozen=True)
class NodeType:
    """One kind of node and what Ray sees of it."""

    name: str
    cpus: float  # advertised to Ray
    gpus: float  # advertised to Ray
    physical_gpus: int
    gpu_model: str = ""
    gpu_mib: int = 0  # memory of each physical GPU
    max_nodes: int = 1
    image: str = ""
    head: bool = False
    custom: dict[str, float] = field(default_factory=dict)
    shared: tuple[str, ...] = ()  # container paths on shared volumes

    @property
    def hidden_gpus(self) -> int:
        """GPUs the machine has but Ray does not hand out (an actor that asks for no GPU still sees them)."""
        return max(0, self.physical_gpus - int(self.gpus))

    @property
    def image_kind(self) -> str:
        """`trainer`, `rollout` or `probe`: the infra/images image this node runs (by its name)."""
        name = self.image.rsplit("/", 1)[-1].split(":")[0]
        return next((k for k in ("rollout", "trainer", "probe") if k in name), name)


@dataclass(frozen=True)
class Cluster:
    """The node types of one cluster file."""

    path: str
    kind: str  # launcher | kuberay
    types: tuple[NodeType, ...]

    def head(self) -> NodeType:
        return next(t for t in self.types if t.head)


def aws_instance(instance: str) -> tuple[int, int, str] | None:
    """(vCPUs, GPUs, GPU model) of an AWS instance type; CPU families give their vCPUs and no GPU."""
    if instance in AWS_P:
        return AWS_P[instance]
    family, _, size = instance.partition(".")
    if family in AWS_GPU and size in _SIZES:
        return (*_SIZES[size], AWS_GPU[family])
    if re.fullmatch(r"[mcr]\d+[a-z]*", family):
        n = 2 if size == "large" else 4 if size == "xlarge" else 4 * int(size.removesuffix("xlarge") or 0)
        return (n, 0, "") if n else None
    return None


def load_cluster(path: str | Path, gpu_memory_gib: float = 0.0) -> Cluster:
    """The node types of a launcher config or a KubeRay RayCluster / RayJob file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"cluster file {str(path)!r} does not exist")
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    doc = next((d for d in docs if isinstance(d, dict) and d.get("kind") in ("RayCluster", "RayJob")), None)
    if doc is not None:
        spec = doc["spec"] if doc["kind"] == "RayCluster" else doc["spec"].get("rayClusterSpec")
        if not spec:
            raise ConfigError(f"{path}: a RayJob with a clusterSelector declares no cluster; plan onto its RayCluster")
        return Cluster(str(path), "kuberay", tuple(_kuberay(spec, path, gpu_memory_gib)))
    if docs and isinstance(docs[0], dict) and "available_node_types" in docs[0]:
        return Cluster(str(path), "launcher", tuple(_launcher(docs[0], path, gpu_memory_gib)))
    raise ConfigError(f"{path}: neither a Ray cluster launcher config (available_node_types) nor a KubeRay "
                      "RayCluster / RayJob")


def _gpu(model: str, override_gib: float) -> int:
    return int(override_gib * 1024) if override_gib else GPU_MIB.get(model, 0)


def network_mounts(commands: list[str]) -> list[str]:
    """Host directories that `mount -t nfs|nfs4|efs ... TARGET` commands (initialization_commands) mount."""
    out = []
    for command in commands:
        for part in re.split(r"&&|\|\||;", str(command)):
            words = part.split()
            if "mount" in words and re.search(r"-t\s+(nfs4?|efs)\b", part):
                out.append(words[-1].rstrip("/"))
    return out


def _volumes(run_options: list[str], mounts: list[str]) -> tuple[str, ...]:
    """Container paths bound by `--volume HOST:PATH[:mode]` from a host path on a network mount, writable."""
    out = []
    for option in run_options:
        match = re.match(r"(?:--volume|-v)[ =](\S+)", option.strip())
        parts = match.group(1).split(":") if match else []
        if len(parts) >= 2 and "ro" not in parts[2:] and any(
                parts[0] == m or parts[0].startswith(m + "/") for m in mounts):
            out.append(parts[1])
    return tuple(out)


def _launcher(cfg: dict[str, Any], path: Path, override_gib: float) -> list[NodeType]:
    docker = cfg.get("docker") or {}
    base_options = list(docker.get("run_options") or [])
    mounts = network_mounts(list(cfg.get("initialization_commands") or []))
    out = []
    for name, spec in (cfg.get("available_node_types") or {}).items():
        head = name == cfg.get("head_node_type")
        resources = dict(spec.get("resources") or {})
        instance = str((spec.get("node_config") or {}).get("InstanceType", ""))
        known = aws_instance(instance)
        if known is None and ("CPU" not in resources or "GPU" not in resources):
            raise ConfigError(f"{path}: node type {name!r}: unknown instance type {instance!r}; give its "
                              "resources CPU and GPU")
        vcpus, physical, model = known or (int(resources["CPU"]), int(resources["GPU"]), "")
        node_docker = spec.get("docker") or {}
        image = node_docker.get("head_image" if head else "worker_image") or \
            docker.get("head_image" if head else "worker_image") or docker.get("image", "")
        options = base_options + list(node_docker.get("run_options") or [])
        out.append(NodeType(
            name=name, cpus=float(resources.get("CPU", vcpus)), gpus=float(resources.get("GPU", physical)),
            physical_gpus=int(physical), gpu_model=model, gpu_mib=_gpu(model, override_gib) if physical else 0,
            max_nodes=1 if head else int(spec.get("max_workers", 0)), image=str(image), head=head,
            custom={k: float(v) for k, v in resources.items() if k not in ("CPU", "GPU")},
            shared=_volumes(options, mounts)))
    if not any(t.head for t in out):
        raise ConfigError(f"{path}: head_node_type {cfg.get('head_node_type')!r} is not a node type")
    return out


def _quantity(value: Any) -> float:
    """A Kubernetes CPU quantity ('8', '500m') as CPUs."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _kuberay(spec: dict[str, Any], path: Path, override_gib: float) -> list[NodeType]:
    groups = [("head", spec["headGroupSpec"], True)]
    groups += [(g["groupName"], g, False) for g in spec.get("workerGroupSpecs") or []]
    out = []
    for name, group, head in groups:
        pod = group["template"]["spec"]
        container = pod["containers"][0]
        limits = (container.get("resources") or {}).get("limits") or {}
        requests = (container.get("resources") or {}).get("requests") or {}
        params = group.get("rayStartParams") or {}
        physical = int(limits.get("nvidia.com/gpu", 0))
        cpus = float(params.get("num-cpus", _quantity(limits.get("cpu", requests.get("cpu", 0)))))
        gpus = float(params.get("num-gpus", physical))
        custom = json.loads(str(params["resources"]).strip().strip("'\"").replace('\\"', '"')) \
            if params.get("resources") else {}
        product = str((pod.get("nodeSelector") or {}).get("nvidia.com/gpu.product", ""))
        model = GFD_PRODUCT.get(product, product)
        claims = {v["name"] for v in pod.get("volumes") or [] if v.get("persistentVolumeClaim")}
        shared = tuple(m["mountPath"] for m in container.get("volumeMounts") or []
                       if m["name"] in claims and not m.get("readOnly"))
        out.append(NodeType(
            name=name, cpus=cpus, gpus=gpus, physical_gpus=physical, gpu_model=model,
            gpu_mib=_gpu(model, override_gib) if physical else 0,
            max_nodes=1 if head else int(group.get("maxReplicas", group.get("replicas", 0))),
            image=str(container.get("image", "")), head=head, custom={k: float(v) for k, v in custom.items()},
            shared=shared))
    return out
