"""What a builder run (`train_builder`, the RL part of `librarian demo`) can and cannot show, in sentences.

`run_findings(results)` reads the figures of results.json (the exam rows,
`exam` utilities, paired differences and per-corpus stores, `sft`,
`history`, `config`, and `control` when a control run is attached) and
returns the sentences the report and results.md open with:

- whether the exam is saturated (the flat store already answers every
  question: no builder can raise correctness, only reading costs can move);
- whether a builder built nothing (its store is the flat store on every
  exam corpus: its row repeats the flat store's figures, it is not "parity");
- the paired exam-utility differences with their CIs, in words;
- how big SFT was (verified builds, samples, updates, loss before and after);
- how many GRPO steps had a signal (a group whose builds differed in reward);
- whether a control (`learner.lr=0`) ran.

Pure: no file is read, nothing is printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from librarian.evaluation.findings import count, difference, excludes_zero, interval, no_signal_steps

STORE_NAMES = {"flat": "the flat store", "scripted_builder": "the scripted builder",
               "trained_builder": "the trained builder", "untrained_builder": "the untrained policy",
               "sft_builder": "the policy after SFT"}
BUILDERS = ("trained_builder", "sft_builder", "untrained_builder", "scripted_builder")
PERFECT = 1.0 - 1e-9


def store_name(name: str) -> str:
    """A store's name as a sentence says it."""
    return STORE_NAMES.get(name, name)


def _row(rows: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((r for r in rows if r.get("name") == name), None)


def unchanged_corpora(exam: Mapping[str, Any], builder: str) -> tuple[int, int]:
    """(exam corpora where `builder`'s store is the flat store, exam corpora `builder` built)."""
    flags = [stores[builder]["same_as_flat"] for stores in (exam.get("corpora") or {}).values()
             if builder in stores and "same_as_flat" in stores[builder]]
    return sum(map(bool, flags)), len(flags)


def built_nothing(exam: Mapping[str, Any], builder: str) -> bool:
    """Whether `builder`'s store is the flat store on every exam corpus."""
    same, total = unchanged_corpora(exam, builder)
    return total > 0 and same == total


def same_stores(exam: Mapping[str, Any], a: str, b: str) -> bool:
    """Whether stores `a` and `b` are both the flat store on every exam corpus (their difference is 0 by
    construction)."""
    return all(name == "flat" or built_nothing(exam, name) for name in (a, b))


def pair_verdict(exam: Mapping[str, Any], pair: str, ci: Sequence[float]) -> str:
    """A paired difference's verdict as a table shows it: `pair` is 'a-b' as in `exam["differences"]`."""
    if same_stores(exam, *pair.split("-", 1)):
        return "0 by construction (both are the flat store)"
    if not excludes_zero(ci):
        return "no difference shown"
    return "a higher" if ci[0] > 0 else "a lower"


def saturated(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the flat store already answers every exam question correctly (mean F1 1)."""
    flat = _row(rows, "flat")
    return flat is not None and flat.get("f1") is not None and flat["f1"] >= PERFECT


def exam_findings(rows: Sequence[Mapping[str, Any]], exam: Mapping[str, Any]) -> list[str]:
    """Saturation, builders that built nothing, and the paired exam-utility differences."""
    flat = _row(rows, "flat")
    if flat is None:
        return ["No exam ran (exam.enabled=false): nothing here compares the builders' stores."]
    corpora = len(exam.get("corpora") or {})
    out = [f"Exam: {count(int(flat.get('n', 0)), 'question')} on {count(corpora, 'held-out corpus', 'held-out corpora')}"
           f"; exam utility U is correctness minus reading costs; intervals are 95% bootstrap CIs."]
    if saturated(rows):
        out.append(f"The exam is saturated: the flat store already answers every exam question (F1 {flat['f1']:.3f}), "
                   "so no builder can raise correctness here; only reading costs (reader actions, tokens) can differ.")
    elif flat.get("f1") is not None:
        out.append(f"The flat store scores F1 {flat['f1']:.3f}, so a builder has room to raise correctness.")
    for builder in BUILDERS:
        same, total = unchanged_corpora(exam, builder)
        if total and same == total:
            where = f"on all {total} exam corpora" if total > 1 else "on the one exam corpus"
            out.append(f"{store_name(builder).capitalize()} built nothing: {where} its store is the flat store itself, "
                       "so its row repeats the flat store's figures (it is not parity with any builder).")
        elif same:
            out.append(f"On {same} of {count(total, 'exam corpus', 'exam corpora')} {store_name(builder)}'s store is "
                       "the flat store itself (it changed nothing there).")
    for pair, d in (exam.get("differences") or {}).items():
        a, b = pair.split("-", 1)
        if same_stores(exam, a, b):
            out.append(f"Exam utility, {store_name(a)} - {store_name(b)}: 0 by construction (both are the flat store).")
        else:
            out.append(difference("Exam utility", store_name(a), store_name(b), d["mean"], d["ci"]))
    return out


def sft_findings(sft: Mapping[str, Any] | None, config: Mapping[str, Any]) -> list[str]:
    """How big the SFT warm start was."""
    if not (config.get("sft") or {}).get("enabled", bool(sft)):
        return ["No SFT warm start ran (sft.enabled=false): GRPO started from the base model."]
    sft = sft or {}
    if sft.get("init_from"):
        return [f"SFT: the warm start saved in {sft['init_from']} was loaded ({count(int(sft.get('sft_steps', 0)), 'update')} "
                "when it was made)."]
    if "teacher_builds" not in sft and "sft_steps" not in sft:
        return ["SFT: this run resumed from a checkpoint; no SFT figures are in it."]
    builds, verified = int(sft.get("teacher_builds", 0)), int(sft.get("verified", 0))
    steps = int(sft.get("sft_steps", 0))
    head = f"SFT warm start: {verified} of {count(builds, 'scripted teacher build')} verified (utility not lost)"
    if not steps:
        return [f"{head}; no update was made, so GRPO started from the base model."]
    return [f"{head}, {count(int(sft.get('samples', 0)), 'token sequence')}, {count(steps, 'update')}; "
            f"SFT loss {sft['sft_loss_first']:.3f} before, {sft['sft_loss_last']:.3f} after."]


def grpo_findings(history: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> list[str]:
    """How many steps ran, which had no signal, and the reward at the two ends."""
    learner = config.get("learner") or {}
    if not history:
        return ["No GRPO step ran."]
    size = f" of {learner['batch_size']} corpora x {learner['group_size']} builds" if "batch_size" in learner else ""
    out = [f"GRPO: {count(len(history), 'step')}{size}; mean build reward {history[0].get('reward', 0.0):+.3f} at the "
           f"first step and {history[-1].get('reward', 0.0):+.3f} at the last (different corpora each step, so this "
           "is no learning curve by itself)."]
    if learner.get("lr") == 0:
        out.append("learner.lr=0: no update was made; this run is a control.")
    silent = no_signal_steps(history)
    if silent:
        out.append(f"{count(len(silent), 'step')} of {len(history)} (step {', '.join(map(str, silent))}) had no group "
                   "whose builds differed in reward: the advantages were 0, so the loss was 0 by construction and "
                   "the weights got no gradient there.")
    return out


def control_findings(results: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Whether a control ran, and the gain over it."""
    if (config.get("learner") or {}).get("lr") == 0:
        return []
    control = results.get("control")
    if not control:
        return ["No control ran (the same run with learner.lr=0): a change across steps or stages cannot be told "
                "from sampling noise (benchmarks/learning_bench.py runs one)."]
    gain, ci = control.get("gain_over_control"), control.get("gain_over_control_ci")
    if gain is None or ci is None:
        return ["A control ran (learner.lr=0), but too few steps to compare with it."]
    verdict = ("the run's reward is higher" if ci[0] > 0 else "the run's reward is lower" if ci[1] < 0
               else "no difference shown")
    return [f"Control (learner.lr=0): reward gain over it {gain:+.3f} (95% CI {interval(ci)}): {verdict}."]


def headline(rows: Sequence[Mapping[str, Any]], exam: Mapping[str, Any], controlled: bool) -> str:
    """One sentence: what the run shows about the trained builder."""
    if _row(rows, "flat") is None:
        return "This run trained the builder but examined nothing, so it shows the training figures only."
    if built_nothing(exam, "trained_builder"):
        return "This run cannot show a trained builder that helps: the trained builder built nothing."
    d = (exam.get("differences") or {}).get("trained_builder-flat")
    if d is None:
        return "This run has no paired exam utility of the trained builder against the flat store."
    figure = f"trained - flat exam utility {d['mean']:+.3f} (95% CI {interval(d['ci'])})"
    if excludes_zero(d["ci"]):
        way = "raise" if d["mean"] > 0 else "lower"
        why = "" if controlled else "; no control ran, so it is not attributed to GRPO"
        return f"The trained builder's stores {way} exam utility over the flat store: {figure}{why}."
    if saturated(rows):
        return (f"This run cannot show a builder that raises correctness: the exam is saturated, and {figure} "
                "shows no difference.")
    return f"This run shows no difference between the trained builder and the flat store: {figure}."


def run_findings(results: Mapping[str, Any]) -> list[str]:
    """The sentences a builder run's report opens with (see the module docstring)."""
    rows, exam = results.get("rows") or [], results.get("exam") or {}
    config, history = results.get("config") or {}, results.get("history") or []
    controlled = bool(results.get("control")) or (config.get("learner") or {}).get("lr") == 0
    return [headline(rows, exam, controlled), *exam_findings(rows, exam), *sft_findings(results.get("sft"), config),
            *grpo_findings(history, config), *control_findings(results, config)]
