"""`librarian plan`: every preset in configs/ plans onto both shipped cluster files (or is a CPU preset), and each
placement or memory defect the GPU-path review found is caught on a config that has it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from librarian.config import ConfigError
from librarian.models.hf import tiny_llama
from librarian.pipelines.plan_command import load_job as validated
from librarian.pipelines.plan_command import main
from librarian.planning.cluster_file import load_cluster
from librarian.planning.job_plan import actors, is_cpu_preset, place_job
from librarian.planning.memory_estimate import MicroBatch, learner_memory
from librarian.planning.model_lookup import resolve
from librarian.planning.model_shape import KNOWN
from librarian.planning.vllm_memory import engine_memory


def load_job(files, overrides=()):
    """A job's config as its pipeline validates it (what `librarian plan` places), as plain data."""
    return validated(files, list(overrides)).config

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "infra/ray/cluster.yaml"
KUBERAY = ROOT / "infra/kuberay/raycluster.yaml"
CLUSTERS = [LAUNCHER, KUBERAY]
BUILDER = [str(ROOT / "configs/train_builder.yaml"), str(ROOT / "configs/cluster.yaml")]
RESEARCHER = [str(ROOT / "configs/researcher_memorygym.yaml"), str(ROOT / "configs/researcher_cluster.yaml")]
# single machines' presets: the one-GPU presets use one GPU of a cluster (test_the_one_gpu_presets_...
# below; tests/cluster/test_colocate.py plans one_gpu.yaml onto a one-GPU node type); the powered, matched
# and revisit learning presets and the researcher's fast learning preset run vLLM on the CPU of one machine
# (tests/pipelines/test_builder_headroom.py checks the builder presets' corpora)
ONE_GPU = ("one_gpu.yaml", "one_gpu_full.yaml")
ONE_MACHINE = (*ONE_GPU, "learning_builder_powered.yaml", "learning_builder_matched.yaml",
               "learning_builder_revisit.yaml", "learning_builder_transfer.yaml", "researcher_learning_fast.yaml")
JOBS = {p.name: [str(p)] for p in sorted((ROOT / "configs").glob("*.yaml")) if p.name not in ONE_MACHINE}
JOBS |= {"train_builder+cluster": BUILDER, "researcher_memorygym+researcher_cluster": RESEARCHER}


def run(files, cluster, *overrides, **kw):
    return place_job(load_job(files, list(overrides)), load_cluster(cluster), **kw)


def placed(report, role):
    """node type of each actor of `role`, from the report's lines."""
    return [line.split("-> ")[1].split("#")[0] for line in report.lines if line.strip().startswith(role)]


def mutated(tmp_path, source: Path, change) -> Path:
    """A copy of a cluster file with `change(doc)` applied."""
    doc = yaml.safe_load(source.read_text())
    change(doc)
    out = tmp_path / source.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


# --- the presets ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster", CLUSTERS, ids=["launcher", "kuberay"])
@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_preset_plans_onto_both_cluster_files(name, cluster):
    report = run(JOBS[name], cluster, "out_dir=/shared/runs/job")
    assert report.ok, report.problems
    if report.cpu_preset:
        assert "a CPU preset" in report.lines[0]
        return
    assert report.idle_gpus == 0 and report.used_gpus > 0 and not report.warnings, report.warnings
    assert all(k in report.memory for k in ("learner@learner", "rollout@rollout")), report.memory


@pytest.mark.parametrize("cluster", CLUSTERS, ids=["launcher", "kuberay"])
@pytest.mark.parametrize("preset", ONE_GPU)
def test_the_one_gpu_presets_plan_onto_one_gpu_of_a_rollout_node_of_both_cluster_files(preset, cluster):
    """The learner and its vLLM engine share one GPU of a node with the rollout image (trainer and vLLM
    environments); the full-weight preset publishes by CUDA IPC, which needs exactly that."""
    report = run([str(ROOT / "configs/train_builder.yaml"), str(ROOT / "configs" / preset)], cluster,
                 "out_dir=/shared/runs/job")
    assert report.ok, report.problems
    lines = [line for line in report.lines if "->" in line]
    pair = [line.split("-> ")[1] for line in lines if line.strip().startswith(("learner rank", "rollout worker"))]
    assert pair == ["rollout#1 GPU 0", "rollout#1 GPU 0"] and report.used_gpus == 1
    shared = report.memory["colocated@rollout"]
    assert max(shared["sampling"], shared["updating"]) <= shared["gpu_gib"]
    job = load_job([str(ROOT / "configs/train_builder.yaml"), str(ROOT / "configs" / preset)])
    full = preset == "one_gpu_full.yaml"
    assert (job["learner"]["lora"]["enabled"], job["rollout"]["options"].get("weight_transfer")) == \
        ((False, "ipc") if full else (True, None))


def test_the_gpu_presets_are_not_cpu_presets_and_the_cpu_ones_are():
    assert not is_cpu_preset(load_job(BUILDER)) and not is_cpu_preset(load_job(RESEARCHER))
    assert not is_cpu_preset(load_job([str(ROOT / "configs/ablate_builder.yaml")]))  # its cells run the GPU preset
    for name in ("demo.yaml", "train_builder.yaml", "evaluate_kbgym.yaml", "curator_scripted.yaml"):
        assert is_cpu_preset(load_job(JOBS[name])), name


def test_the_builder_preset_lands_where_the_infra_says():
    launcher = run(BUILDER, LAUNCHER)
    assert placed(launcher, "learner rank") == ["learner", "learner"]
    assert placed(launcher, "rollout worker") == ["rollout"] * 4 and placed(launcher, "probe worker") == ["probe"] * 8
    assert launcher.nodes == {"head": 1, "learner": 2, "rollout": 1, "probe": 4} and launcher.used_gpus == 10
    kuberay = run(BUILDER, KUBERAY)
    assert kuberay.nodes == {"head": 1, "learner": 2, "rollout": 4, "probe": 4}
    assert any("out_dir=build/train_builder is not on the volume" in w for w in kuberay.warnings)


# --- the defects, each on a config that has it -------------------------------------------------------------
def test_probe_gpus_that_probe_nodes_do_not_advertise():
    """probe.gpus_per_worker 0.5 against probe nodes that hide their GPU: on KubeRay 4 of 8 probes never start,
    on the launcher they take two extra 4-GPU rollout nodes and leave GPUs idle."""
    kuberay = run(BUILDER, KUBERAY, "probe.gpus_per_worker=0.5")
    stuck = [p for p in kuberay.problems if "cannot be placed (the pool waits" in p]
    assert len(stuck) == 4 and all(p.startswith("probe worker") for p in stuck)
    launcher = run(BUILDER, LAUNCHER, "probe.gpus_per_worker=0.5")
    assert placed(launcher, "probe worker") == ["rollout"] * 8 and launcher.nodes["rollout"] == 3
    assert launcher.idle_gpus == 4 and any("4 of 14 GPUs" in w for w in launcher.warnings)


def test_the_researcher_rollouts_asking_4_cpus():
    kuberay = run(RESEARCHER, KUBERAY, "rollout.cpus_per_worker=4")
    stuck = [p for p in kuberay.problems if "(4 CPU, 1 GPU) cannot be placed (the placement group waits, then "
             "TopologyError" in p]
    assert len(stuck) == 3 and "rollout offers 1 CPU / 1 GPU" in stuck[0]
    assert any("rollout worker 0 runs vLLM on learner#2" in p for p in kuberay.problems)  # the one that did fit
    launcher = run(RESEARCHER, LAUNCHER, "rollout.cpus_per_worker=4")  # one 4-CPU bundle fills a 4-GPU node
    assert launcher.nodes["rollout"] == 3 and launcher.idle_gpus == 9
    assert any("9 of 14 GPUs on the started nodes stay idle" in w for w in launcher.warnings)
    assert any("rollout worker 0 runs vLLM on learner#2" in p for p in launcher.problems)  # the 4th took a learner


@pytest.mark.parametrize("files, overrides, tokens", [
    (BUILDER, ["learner.max_tokens_per_micro_batch=0", "learner.gradient_checkpointing=false"], 32 * 8192),
    (RESEARCHER, ["learner.max_tokens_per_micro_batch=0", "learner.grad_accum=16"], 8 * 32768),
    (BUILDER, ["learner.gradient_checkpointing=false"], 16384),
])
def test_learner_memory_without_checkpointing_or_a_token_budget(files, overrides, tokens):
    report = run(files, LAUNCHER, *overrides)
    memory = [p for p in report.problems if p.startswith("learner rank 0 on learner#1")]
    assert memory and f"now {tokens} tokens a micro-batch" in memory[0]
    assert report.memory["learner@learner"]["micro_batch_tokens"] == tokens


def test_fp32_weights_and_whole_vocabulary_logprobs_cost_what_they_should():
    shape, batch = KNOWN["qwen2.5-7b"], MicroBatch(16384, 8192)
    bf16 = learner_memory(shape, load_learner(), batch)
    fp32 = learner_memory(shape, load_learner("learner.precision=fp32"), batch)
    whole = learner_memory(shape, load_learner("learner.logprob_chunk=0"), batch)
    assert fp32.weights == pytest.approx(2 * bf16.weights)
    chunk = "log-prob chunk (recomputed, backward)"  # 16k positions x 152k vocabulary, against one chunk of 1024
    assert whole.parts["logprobs"][chunk] == pytest.approx(16 * bf16.parts["logprobs"][chunk], rel=0.01)
    assert whole.phases["logprobs"] > 3 * bf16.phases["logprobs"]
    two = learner_memory(shape, load_learner("learner.workers=1"), batch)
    assert two.optimizer == pytest.approx(2 * bf16.optimizer)  # ZeRO-2 splits AdamW's state over the ranks
    three = learner_memory(shape, load_learner("learner.deepspeed.zero_stage=3"), batch)
    assert three.weights == pytest.approx(bf16.weights / 2)


def load_learner(*overrides):
    return actors(load_job(BUILDER, list(overrides)))[3]


@pytest.mark.parametrize("overrides, expect", [
    (["probe.options.engine_kwargs.gpu_memory_utilization=0.6"], "2 vLLM engines share it with "
                                                                 "gpu_memory_utilization adding up to 1.20"),
    (["probe.options.max_model_len=400000"], "tokens < max_model_len 400000"),
    (["rollout.options.mode=inprocess"], "mode 'inprocess' needs vLLM"),
    (["ray.learner_gpus=0"], "learner.device is cuda but ray.learner_gpus is 0"),
])
def test_engine_and_transfer_mistakes(overrides, expect):
    report = run(BUILDER, LAUNCHER, *overrides)
    assert any(expect in p for p in report.problems), report.problems


def test_tensor_parallel_engines_fit_when_they_reserve_their_gpus():
    tp2 = ["rollout.options.engine_kwargs.tensor_parallel_size=2", "rollout.gpus_per_worker=2", "out_dir=/shared/runs/x"]
    report = run(BUILDER, LAUNCHER, *tp2, "rollout.cpus_per_worker=2")
    assert report.ok, report.problems
    assert report.nodes["rollout"] == 2 and report.memory["rollout@rollout"]["tensor_parallel"] == 2
    # with 1 CPU a worker, half a rollout node's CPUs stay free and probe workers land there, among Ray's GPUs
    crowded = run(BUILDER, LAUNCHER, *tp2)
    assert any(p.startswith("probe worker 0 runs a vLLM engine but asks Ray for no GPU, and landed on rollout#1")
               for p in crowded.problems)


def test_a_vllm_probe_without_a_gpu_of_its_own(tmp_path):
    """Probe nodes that give their GPU to Ray: a probe worker asking for no GPU would share Ray's GPUs unseen."""
    def advertise(doc):
        doc["available_node_types"]["probe"]["resources"]["GPU"] = 1

    report = run(BUILDER, mutated(tmp_path, LAUNCHER, advertise))
    assert any("asks Ray for no GPU" in p and "every GPU there is Ray's" in p for p in report.problems)


def test_launcher_without_shared_storage_or_the_rollout_image(tmp_path):
    def no_efs(doc):
        doc["initialization_commands"] = []

    report = run(BUILDER, mutated(tmp_path, LAUNCHER, no_efs))
    assert any("mount no shared volume" in p and "other ranks" in p for p in report.problems)

    def trainer_image(doc):
        doc["available_node_types"]["rollout"]["docker"]["worker_image"] = "registry.example.com/librarian/trainer:0.1.0"

    report = run(BUILDER, mutated(tmp_path, LAUNCHER, trainer_image))
    assert sum("has no vLLM environment" in p for p in report.problems) == 4


def test_kuberay_gpu_memory_comes_from_the_node_selector(tmp_path):
    def no_selector(doc):
        for group in doc["spec"]["workerGroupSpecs"]:
            group["template"]["spec"].pop("nodeSelector", None)

    bare = mutated(tmp_path, KUBERAY, no_selector)
    report = run(BUILDER, bare)
    assert any("GPU memory of node type learner is unknown" in p for p in report.problems)
    assert place_job(load_job(BUILDER), load_cluster(bare, gpu_memory_gib=80)).ok


# --- reading cluster files and models -----------------------------------------------------------------------
def test_cluster_files_are_read_as_ray_sees_them():
    launcher = {t.name: t for t in load_cluster(LAUNCHER).types}
    assert (launcher["probe"].gpus, launcher["probe"].physical_gpus, launcher["probe"].hidden_gpus) == (0, 1, 1)
    assert launcher["rollout"].gpu_model == "L40S" and launcher["rollout"].gpu_mib == 46068
    assert launcher["learner"].shared == ("/shared/runs",) and launcher["head"].head
    assert launcher["probe"].image_kind == "rollout" and launcher["probe_cpu"].image_kind == "probe"
    kuberay = {t.name: t for t in load_cluster(KUBERAY).types}
    assert (kuberay["probe"].cpus, kuberay["probe"].hidden_gpus, kuberay["probe"].gpu_model) == (2, 1, "L4")
    assert kuberay["rollout"].custom == {"librarian_rollout": 1.0} and kuberay["learner"].max_nodes == 2
    assert kuberay["learner"].shared == ("/shared/runs",)
    job = load_cluster(ROOT / "infra/kuberay/rayjob.yaml")
    assert [(t.name, t.cpus, t.gpus) for t in job.types] == [(t.name, t.cpus, t.gpus) for t in kuberay.values()]


def test_model_shapes():
    assert KNOWN["qwen2.5-7b"].params == pytest.approx(7.62e9, rel=0.01)  # the model card's 7.61B
    assert KNOWN["qwen2.5-1.5b"].params == pytest.approx(1.54e9, rel=0.01)
    assert KNOWN["llama-3.1-8b"].params == pytest.approx(8.03e9, rel=0.01)

    model = tiny_llama(seed=0).model
    assert KNOWN["tiny"].params == sum(p.numel() for p in model.parameters())
    with pytest.raises(ConfigError, match="not a known architecture"):
        resolve("/nowhere/model")


def test_a_kv_cache_too_small_for_one_sequence_is_caught():
    est = engine_memory(KNOWN["qwen2.5-7b"], {"dtype": "bfloat16", "max_model_len": 32768,
                                             "engine_kwargs": {"gpu_memory_utilization": 0.4}}, 23034)
    assert est.kv_space < 0 and est.full_sequences == 0


# --- the command ---------------------------------------------------------------------------------------------
def test_the_command_exits_0_when_it_fits_and_2_when_it_does_not(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["--config", "configs/train_builder.yaml", "--config", "configs/cluster.yaml",
                 "out_dir=/shared/runs/x"]) == 0
    out = capsys.readouterr().out
    assert out.count("result: fits") == 2 and "infra/kuberay/raycluster.yaml" in out
    assert main(["-c", "configs/train_builder.yaml", "-c", "configs/cluster.yaml", "--cluster",
                 "infra/kuberay/raycluster.yaml", "--json", "probe.gpus_per_worker=0.5"]) == 2
    reports = json.loads(capsys.readouterr().out)
    assert len(reports) == 1 and not reports[0]["ok"] and reports[0]["problems"]
    assert main(["--config", "configs/demo.yaml"]) == 0
    assert "result: CPU preset" in capsys.readouterr().out
    assert main(["--config", "configs/nope.yaml"]) == 2
    assert capsys.readouterr().err.strip().startswith("librarian plan: config file 'configs/nope.yaml' does not exist")
    assert main(["--config", "configs/cluster.yaml", "--cluster", "configs/demo.yaml"]) == 2
    assert "neither a Ray cluster launcher config" in capsys.readouterr().err
