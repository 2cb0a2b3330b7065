"""Every command in docs/cluster.md is checked: `bash -n` per block, `librarian` commands through the real
config loaders, `ray` / `mlflow` through their own CLIs, files named by kubectl / helm / docker exist."""

from __future__ import annotations

import re

import pytest

from tests.infra.cmdcheck import ROOT, Checker, CommandError, bash_blocks, simple_commands

DOC = ROOT / "docs/cluster.md"
BLOCKS = bash_blocks(DOC.read_text())
IMAGES_README = bash_blocks((ROOT / "infra/images/README.md").read_text())


@pytest.fixture(scope="module")
def seen():
    """Every simple command of the document, after checking them all once."""
    checker = Checker()
    for block in BLOCKS:
        checker.check_text(block.text)
    return checker.seen


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"line{b.line}")
def test_block_commands_are_valid(block):
    try:
        Checker().check_text(block.text)
    except CommandError as exc:
        pytest.fail(f"docs/cluster.md line {block.line}: {exc}")


def test_images_readme_commands_are_valid():
    assert IMAGES_README
    for block in IMAGES_README:
        Checker().check_text(block.text)


def test_the_document_covers_the_whole_path(seen):
    commands = {" ".join(w[:2]) for w in seen} | {" ".join(w[:3]) for w in seen}
    for expected in ("docker build", "docker push", "ray up", "ray job submit", "ray down", "helm install",
                     "kubectl -n librarian", "librarian train_builder", "librarian ablate",
                     "librarian train_researcher", "docker compose"):
        assert any(c.startswith(expected) for c in commands), f"docs/cluster.md has no `{expected}` command"
    entrypoints = [w for w in seen if w[0] == "librarian"]
    assert len(entrypoints) >= 5  # the ones after `ray job submit --` are checked too
    applied = {w[w.index("-f") + 1] for w in seen if w[0] == "kubectl" and "-f" in w}
    assert {"infra/kuberay/rayjob.yaml", "infra/kuberay/raycluster.yaml", "infra/mlflow/kubernetes.yaml",
            "infra/elasticsearch/kubernetes.yaml"} <= applied


@pytest.mark.parametrize("text, message", [
    ("if then fi\n", "bash -n"),
    ("librarian train_buildr out_dir=x\n", "unknown librarian command"),
    ("librarian train_builder rollout.wrkers=2\n", "unknown config key 'rollout.wrkers'"),
    ("librarian train_builder steps=many\n", "bad value for 'steps'"),
    ("librarian train_builder config=configs/nope.yaml\n", "does not exist"),
    ("librarian train_builder learner.temperature=0.5\n", "must equal rollout.temperature"),
    ("librarian ablate config=configs/ablate_smoke.yaml max_concurent=2\n", "unknown config key"),
    ("librarian ablate config=configs/ablate_smoke.yaml base.overrides.rollout.wrkers=1\n",
     "librarian ablate: cell"),
    ("ray up infra/ray/cluster.yaml --yess\n", "No such option"),
    ("ray jobs submit -- echo\n", "No such command"),
    ("ray up infra/ray/clster.yaml\n", "does not exist"),
    ("ray job submit --address http://h:8265 -- librarian train_builder ray.adress=auto\n", "ray.adress"),
    ("ray job submit --adress http://h:8265 -- librarian train_builder\n", "No such option"),
    ("kubectl apply -f infra/kuberay/rayjob-typo.yaml\n", "does not exist"),
    ("helm install x kuberay/kuberay-operator -f infra/values.yaml\n", "does not exist"),
    ("docker build -f infra/images/trainer.Dockerfile -t x:1 nope-dir\n", "build context"),
    ("cd infra/nowhere && ls\n", "does not exist"),
    ("cd infra/mlflow && docker compose -f compose.yaml up\n", "does not exist"),
    ("mlflow server --port\n", "requires an argument"),
])
def test_broken_commands_are_caught(text, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        Checker().check_text(text)


def test_valid_snippets_pass():
    checker = Checker()
    checker.check_text("export X=1\nRAY_AUTH_MODE=disabled ray job list --address http://h:8265 | head\n"
                       "librarian ablate config=configs/ablate_smoke.yaml ray.address=auto out_dir=/tmp/sweep\n"
                       "cd infra/mlflow && docker compose up -d\n")
    assert [w[0] for w in checker.seen] == ["export", "ray", "head", "librarian", "cd", "docker"]
    assert checker.cwd == ROOT / "infra/mlflow"


def test_simple_commands_split_like_a_shell():
    text = "A=1 ray up x.yaml --yes && echo 'a && b' | tee out.log # note\nkubectl get pods > pods.txt\n" \
           "ray job submit \\\n  --address h -- librarian demo\n"
    assert list(simple_commands(text)) == [
        ["A=1", "ray", "up", "x.yaml", "--yes"], ["echo", "a && b"], ["tee", "out.log"],
        ["kubectl", "get", "pods"], ["ray", "job", "submit", "--address", "h", "--", "librarian", "demo"]]


def test_links_to_the_moved_topology_doc():
    """The Ray topology page moved to docs/topology.md; docs/cluster.md is the cluster guide."""
    assert (ROOT / "docs/topology.md").read_text().startswith("# The Ray topology")
    assert "# The Ray topology" not in DOC.read_text()
    for ref in re.findall(r"(?<![\w/])(?:docs/[a-z_\-]+\.md|infra/[\w./-]+\w)", DOC.read_text()):
        assert (ROOT / ref).exists(), f"docs/cluster.md names missing {ref}"
    readme = (ROOT / "README.md").read_text()
    assert "docs/topology.md" in readme and "docs/cluster.md" in readme and "infra/" in readme
    assert "(docs/topology.md)" in (ROOT / "docs/train_builder.md").read_text()
