"""`librarian plan` never says "fits" wrongly: it validates a job exactly as the job's pipeline does before placing
anything (an unknown key with the closest valid one, a bad value, an inconsistent setting: one line, exit 2,
naming the pipeline it assumed), and a memory problem lists only the changes that make the estimate fit (tried
here by planning again with each one), or says that none does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from librarian.pipelines.plan_command import guess, load_job, main, set_keys
from librarian.planning.cluster_file import load_cluster
from librarian.planning.job_plan import place_job

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "infra/ray/cluster.yaml"
BUILDER = ["configs/train_builder.yaml", "configs/cluster.yaml"]
RESEARCHER = ["configs/researcher_memorygym.yaml", "configs/researcher_cluster.yaml"]


def cli(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(ROOT)
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_misspelled_key_exits_2_naming_the_right_one(capsys, monkeypatch):
    code, out, err = cli(capsys, monkeypatch, "--config", "configs/cluster.yaml", "--cluster", "infra/ray/cluster.yaml",
                         "rollout.workrs=9")
    assert code == 2 and out == ""  # no report, no "result: fits"
    assert err.strip() == ("librarian plan: unknown config key 'rollout.workrs' (did you mean 'rollout.workers'?) "
                           "(validated as librarian train_builder's config, guessed from its keys)")


@pytest.mark.parametrize("overrides, expect", [
    (["learner.lrr=1"], "unknown config key 'learner.lrr' (did you mean 'learner.lr'?)"),
    (["rollout.workers=abc"], "bad value for 'rollout.workers': Value 'abc' of type 'str' could not be converted"),
    (["learner.precision=fp16"], "learner.precision must be one of fp32, bf16, got 'fp16'"),
    (["rollout.options.engine_kwargs.tensor_parallel_size=2"], "rollout.gpus_per_worker (1) must equal"),
    (["learner.lora.enabled=false", "rollout.options.weight_transfer=ipc"], "set rollout.colocate=true"),
    (["learner.call_timeout_s=-1"], "learner.call_timeout_s and learner.gpu_memory_gib must be >= 0"),
])
def test_what_the_pipeline_refuses_plan_refuses_in_one_line(capsys, monkeypatch, overrides, expect):
    code, out, err = cli(capsys, monkeypatch, *[a for f in BUILDER for a in ("-c", f)], *overrides)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert expect in err and "librarian train_builder's config" in err


def test_the_report_names_the_pipeline_it_assumed_and_pipeline_picks_another(capsys, monkeypatch):
    code, out, _ = cli(capsys, monkeypatch, *[a for f in RESEARCHER for a in ("-c", f)], "--cluster",
                       "infra/ray/cluster.yaml", "out_dir=/shared/runs/x")
    assert code == 0 and "pipeline: train_researcher (guessed from its keys" in out
    code, out, err = cli(capsys, monkeypatch, "-c", "configs/cluster.yaml", "--pipeline", "evaluate")
    assert code == 2 and "unknown config key 'ray" in err and "librarian evaluate's config, given" in err
    code, _, err = cli(capsys, monkeypatch, "-c", "configs/cluster.yaml", "--pipeline", "nope")
    assert code == 2 and "--pipeline must be one of train_builder" in err
    assert guess(set_keys([str(ROOT / "configs/curator_scripted.yaml")], [])) == "train_curator"
    assert guess(set_keys([str(ROOT / "configs/ablate_builder.yaml")], [])) == "ablate"


def test_help_mentions_key_value_overrides(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "[key=value ...]" in out and "key=value overrides follow the options" in out


def test_a_sweep_is_validated_cell_by_cell_and_its_first_cell_planned(capsys, monkeypatch):
    job = load_job([str(ROOT / "configs/ablate_builder.yaml")])
    assert job.pipeline == "train_builder" and job.cell and job.config["out_dir"].endswith(f"/cells/{job.cell}")
    code, _, err = cli(capsys, monkeypatch, "-c", "configs/ablate_builder.yaml", "base.overrides={learner.lrr: 1}")
    assert code == 2 and "unknown config key 'learner.lrr'" in err and "cell" in err


# --- memory: only fixes that work --------------------------------------------------------------------------------
def fixes_in(problem: str) -> list[list[str]]:
    """Each suggested change of a learner problem as the overrides it stands for."""
    if "it fits with " in problem:
        found = [problem.split("it fits with ", 1)[1]]
    elif "any one of these makes it fit: " in problem:
        found = problem.split("any one of these makes it fit: ", 1)[1].split("; ")
    else:
        return []
    return [re.findall(r"[a-z_.]+=[\w.]+", fix) for fix in found]


def learner_problems(report) -> list[str]:
    return [p for p in report.problems if p.startswith("learner rank") and " GiB of " in p]


@pytest.mark.parametrize("overrides, policy, gib", [
    (["learner.gradient_checkpointing=false"], "", 0),
    (["learner.max_tokens_per_micro_batch=10000000"], "", 0),
    (["learner.lora.enabled=false", "rollout.options.weight_transfer=file"], "", 0),
    ([], "qwen2.5-32b", 20),
])
def test_every_suggested_fix_makes_the_estimate_fit(overrides, policy, gib):
    files = [str(ROOT / f) for f in BUILDER]
    cluster = load_cluster(LAUNCHER, gpu_memory_gib=gib)
    report = place_job(load_job(files, overrides).config, cluster, policy=policy)
    problems = learner_problems(report)
    assert problems, report.problems
    fixes = fixes_in(problems[0])
    assert fixes, problems[0]
    for fix in fixes:
        again = place_job(load_job(files, overrides + fix).config, cluster, policy=policy)
        assert not learner_problems(again), (fix, learner_problems(again))


def test_weights_alone_over_the_gpu_say_so_and_suggest_nothing():
    files = [str(ROOT / f) for f in BUILDER]
    report = place_job(load_job(files).config, load_cluster(LAUNCHER, gpu_memory_gib=2), policy="qwen2.5-32b")
    problem = learner_problems(report)[0]
    assert "the weights alone (61.0 GiB) do not fit" in problem
    assert "no setting here makes it fit" in problem and "use GPUs with more memory or a smaller model" in problem
    assert fixes_in(problem) == []
