"""The deployment files under infra/ and the configs: they parse, validate against their schemas where
one is available offline, and refer only to things that exist. Each check is also shown to fail."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest

from tests.infra.cmdcheck import Checker, CommandError, parse_click
from tests.infra.manifests import (
    ROOT,
    compose_problems,
    dockerfile_problems,
    k8s_problems,
    kuberay_problems,
    launcher_problems,
    yaml_docs,
)

INFRA = ROOT / "infra"
YAML_FILES = sorted([*INFRA.rglob("*.yaml"), *INFRA.rglob("*.yml"), *(ROOT / "configs").glob("*.yaml")])
K8S_FILES = [INFRA / "mlflow/kubernetes.yaml", INFRA / "mlflow/secrets.example.yaml",
             INFRA / "elasticsearch/kubernetes.yaml", INFRA / "kuberay/storage.yaml"]
KUBERAY_FILES = sorted((INFRA / "kuberay").glob("ray*.yaml"))
COMPOSE_FILES = sorted(INFRA.rglob("docker-compose.yml"))
DOCKERFILES = sorted([*(INFRA / "images").glob("*.Dockerfile"), INFRA / "mlflow/Dockerfile"])


def _load(path: Path) -> list:
    return yaml_docs(path)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_parses(path):
    docs = _load(path)
    assert docs, f"{path} has no YAML document"
    assert all(isinstance(d, dict) for d in docs), f"{path}: every document must be a mapping"


def test_the_file_lists_cover_infra():
    """Every YAML under infra/ is checked by one of the schema tests below."""
    covered = {*K8S_FILES, *KUBERAY_FILES, *COMPOSE_FILES, INFRA / "ray/cluster.yaml"}
    infra_yaml = {p for p in YAML_FILES if INFRA in p.parents}
    assert infra_yaml - covered == set()
    assert len(KUBERAY_FILES) == 3 and len(DOCKERFILES) == 4


# --- Ray cluster launcher ------------------------------------------------------------------------------------
def test_cluster_launcher_validates_against_ray_schema():
    config = _load(INFRA / "ray/cluster.yaml")[0]
    assert launcher_problems(config) == []
    assert set(config["available_node_types"]) >= {"head", "learner", "rollout", "probe"}


@pytest.mark.parametrize("mutate, expect", [
    (lambda c: c.update(max_wokers=4), "ray schema"),
    (lambda c: c["available_node_types"]["rollout"].update(resources={"CPU": -1}), "ray schema"),
    (lambda c: c.update(head_node_type="nope"), "ray schema"),
    (lambda c: c["available_node_types"]["head"].update(resources={"CPU": 4}), "CPU 0"),
    (lambda c: c["available_node_types"]["rollout"].update(worker_setup_commands=["true"]), "vLLM env"),
    (lambda c: c["available_node_types"].pop("learner"), "learner"),
])
def test_cluster_launcher_check_catches_mistakes(mutate, expect):
    config = copy.deepcopy(_load(INFRA / "ray/cluster.yaml")[0])
    mutate(config)
    problems = launcher_problems(config)
    assert any(expect in p for p in problems), problems


def test_launcher_file_mounts_and_images():
    config = _load(INFRA / "ray/cluster.yaml")[0]
    assert list(config["file_mounts"].values()) == ["."]  # the checkout, from the repository root
    images = {config["docker"]["head_image"]} | {t.get("docker", {}).get("worker_image", config["docker"]["image"])
                                                  for t in config["available_node_types"].values()}
    assert {i.rsplit("/", 1)[-1].split(":")[0] for i in images} == {"trainer", "rollout", "probe"}


# --- Kubernetes core objects ---------------------------------------------------------------------------------
def test_kubernetes_objects_validate_against_their_schemas():
    kinds = set()
    for path in K8S_FILES:
        for doc in _load(path):
            assert k8s_problems(doc, str(path.relative_to(ROOT))) == []
            kinds.add(doc["kind"])
    assert kinds >= {"Deployment", "Service", "StatefulSet", "Secret", "PersistentVolumeClaim", "ConfigMap"}


@pytest.mark.parametrize("mutate", [
    lambda d: d["spec"].update(replicass=1),                                       # unknown field
    lambda d: d["spec"]["template"]["spec"]["containers"][0].update(ports=[{"containerPort": "http"}]),
    lambda d: d["spec"].pop("selector"),                                           # required field
])
def test_kubernetes_schema_catches_mistakes(mutate):
    deployment = next(d for d in _load(INFRA / "mlflow/kubernetes.yaml") if d["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    mutate(broken)
    assert k8s_problems(broken, "mutated") != []


def test_mlflow_server_commands_parse():
    """The compose command and the Deployment's shell command are accepted by `mlflow server`'s own CLI."""
    from mlflow.cli import cli

    compose = _load(INFRA / "mlflow/docker-compose.yml")[0]["services"]["mlflow"]["command"]
    ctx = parse_click(cli, "mlflow", compose[1:])
    assert ctx.params["serve_artifacts"] and ctx.params["workers"] == "4"
    assert ctx.params["backend_store_uri"].startswith("postgresql")
    deployment = next(d for d in _load(INFRA / "mlflow/kubernetes.yaml") if d["kind"] == "Deployment")
    words = shlex.split(deployment["spec"]["template"]["spec"]["containers"][0]["args"][0])
    assert words[:3] == ["exec", "mlflow", "server"]
    ctx = parse_click(cli, "mlflow", words[2:])
    assert ctx.params["serve_artifacts"] and "mlflow.librarian.svc:*" in ctx.params["allowed_hosts"]
    with pytest.raises(CommandError, match="--serve-artifact"):
        parse_click(cli, "mlflow", ["server", "--serve-artifact"])


# --- KubeRay -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", KUBERAY_FILES, ids=lambda p: p.name)
def test_kuberay_objects_have_the_required_structure(path):
    for doc in _load(path):
        assert kuberay_problems(doc, path.name) == []


def test_rayjob_runs_the_raycluster_spec():
    cluster = _load(INFRA / "kuberay/raycluster.yaml")[0]
    job = _load(INFRA / "kuberay/rayjob.yaml")[0]
    assert job["spec"]["rayClusterSpec"] == cluster["spec"]
    ablate = _load(INFRA / "kuberay/rayjob-ablate.yaml")[0]
    assert ablate["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]


@pytest.mark.parametrize("path", KUBERAY_FILES, ids=lambda p: p.name)
def test_rayjob_entrypoints_are_valid_commands(path):
    """A RayJob's entrypoint goes through the same checker as docs/cluster.md (real config loaders)."""
    for doc in _load(path):
        if doc["kind"] == "RayJob":
            checker = Checker()
            checker.check_text(doc["spec"]["entrypoint"] + "\n")
            assert any(w[0] == "librarian" for w in checker.seen)


def _raycluster():
    return copy.deepcopy(_load(INFRA / "kuberay/raycluster.yaml")[0])


def _group(doc, name):
    return next(g for g in doc["spec"]["workerGroupSpecs"] if g["groupName"] == name)


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d.update(apiVersion="ray.io/v1alpha1"), "apiVersion"),
    (lambda d: d["spec"].pop("headGroupSpec"), "headGroupSpec"),
    (lambda d: d["spec"]["workerGroupSpecs"].remove(_group(d, "probe")), "'probe' missing"),
    (lambda d: _group(d, "rollout")["template"]["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
     "no nvidia.com/gpu"),
    (lambda d: _group(d, "learner").update(replicas="1"), "integer"),
    (lambda d: _group(d, "probe")["rayStartParams"].update({"num-cpus": 2}), "string"),
    (lambda d: _group(d, "rollout")["template"]["spec"]["containers"][0].update(imagePullPolcy="Always"),
     "group rollout"),
    (lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].pop("env"), "env lacks"),
])
def test_kuberay_check_catches_mistakes(mutate, expect):
    doc = _raycluster()
    mutate(doc)
    problems = kuberay_problems(doc, "mutated")
    assert any(expect in p for p in problems), problems


def test_rayjob_check_catches_mistakes():
    job = copy.deepcopy(_load(INFRA / "kuberay/rayjob.yaml")[0])
    job["spec"].pop("entrypoint")
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "x"}
    problems = kuberay_problems(job, "mutated")
    assert any("entrypoint" in p for p in problems) and any("exactly one" in p for p in problems)
    with pytest.raises(CommandError, match="unknown config key 'ray.adress'"):
        Checker().check_text("cd /opt/librarian && librarian train_builder ray.adress=auto\n")


# --- compose and Dockerfiles ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: str(p.parent.name))
def test_compose_files_reference_defined_services_and_volumes(path):
    assert compose_problems(_load(path)[0], path.parent) == []


def test_compose_check_catches_mistakes():
    doc = copy.deepcopy(_load(INFRA / "mlflow/docker-compose.yml")[0])
    doc["services"]["mlflow"]["depends_on"]["postgress"] = {"condition": "service_healthy"}
    doc["services"]["postgres"]["volumes"] = ["pgdta:/var/lib/postgresql/data"]
    doc["services"]["mlflow"]["build"]["dockerfile"] = "Nope.Dockerfile"
    problems = compose_problems(doc, INFRA / "mlflow")
    assert len(problems) == 3, problems


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_start_from_and_copy_existing_files(path):
    context = INFRA / "mlflow" if path.parent.name == "mlflow" else ROOT
    assert dockerfile_problems(path, context=context) == []


def test_dockerfile_check_catches_mistakes(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("ARG X=1\nRUN echo hi\nFROM python:3.11\nCOPY nonexistent_dir ./x\nCOPY --chown=1 configs ./configs\n")
    problems = dockerfile_problems(bad)
    assert len(problems) == 2 and "FROM" in problems[0] and "nonexistent_dir" in problems[1]


def test_images_install_what_the_brief_requires():
    trainer = (INFRA / "images/trainer.Dockerfile").read_text()
    rollout = (INFRA / "images/rollout.Dockerfile").read_text()
    probe = (INFRA / "images/probe.Dockerfile").read_text()
    assert "scripts/install_runtime.sh pip gpu" in trainer and "nvidia/cuda" in trainer
    assert "scripts/vllm_env.sh --gpu /opt/vllm-env" in rollout
    assert "--constraint constraints/cpu.txt" in probe and "whl/cpu" in probe
