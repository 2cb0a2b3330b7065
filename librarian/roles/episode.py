"""The episode loop: a policy backend against an environment, under a budget and a memory window.

The loop is role-agnostic: it asks the environment for the opening messages,
shows the policy its memory (the opening plus the last k action-result
pairs, or the full history, compacted by a hook when it grows too long),
parses nothing itself, enforces the action budget, forces a final answer
when the role asks for one, and records every turn. `run_episodes` steps a
batch of environments in lockstep so an LLM backend generates for all of
them at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from librarian.models.base import Message, PolicyBackend, Sample, SamplingParams, ToolSchema
from librarian.models.chat import with_tools_in_system
from librarian.models.constrained import MAX_ITEMS, compact_schema, tool_call_grammar
from librarian.roles.definitions import Role
from librarian.roles.environment import Environment, Step
from librarian.roles.trajectory import Trajectory, TurnRecord

log = logging.getLogger(__name__)

Compactor = Callable[[list[Message]], list[Message]]
FORCE_ANSWER = ("You have used all {budget} actions of your budget. Answer now: call {tool} with your best answer; "
                "no other tool will run.")


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Loop settings beyond the role: sampling, and when the full history is compacted."""

    params: SamplingParams = SamplingParams(max_new_tokens=256, temperature=1.0)
    compactor: Compactor | None = None
    compact_at_chars: int = 24_000
    constrained: bool = False  # sample every turn under the tool-call grammar of the role's tools
    free_text: bool = False  # under a grammar: a short thought may come before the calls
    grammar_enums: tuple[tuple[str, tuple[str, ...]], ...] = ()  # argument name -> allowed values (paths)
    live_enums: Callable[[], Mapping[str, Sequence[str]]] | None = None  # enums read again at every turn (e.g.
    # the files the builds have created so far), over `grammar_enums`
    compact_listing: bool = False  # list the compact signatures even when not constrained: a scripted SFT
    # teacher must see the prompt its constrained student will see
    tool_listing: str = "schema"  # how the system turn lists the tools: schema (the backend's JSON schemas) |
    # signatures (one short line a tool, written here; the backend gets no schemas; compact under a grammar)
    max_items: int = MAX_ITEMS  # under a grammar: the most items an array argument (sources, children) holds
    env_enums: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = ()  # per environment (in `run_episodes`'
    # order), enums over `grammar_enums`: environments of different corpora decoded in one batch, each under the
    # grammar of its own paths

    def __post_init__(self) -> None:
        if self.tool_listing not in ("schema", "signatures"):
            raise ValueError(f"tool_listing must be schema or signatures, got {self.tool_listing!r}")

    def listed(self, prompts: list[list[Message]], tools: Sequence[ToolSchema] | None
               ) -> tuple[list[list[Message]], Sequence[ToolSchema] | None]:
        """The prompts and the tools to hand the backend: as they are (`schema`), or with the signatures
        written into the system turn and no tools (`signatures`)."""
        if self.tool_listing == "schema" or not tools:
            return prompts, tools

        shown = list(tools)
        if self.constrained or self.compact_listing:  # the arguments the grammar lets the policy write

            shown = [{**t, "function": {**t["function"], "parameters": compact_schema(
                t["function"].get("parameters") or {"type": "object", "properties": {}}, max_items=self.max_items)}}
                for t in tools]
        return [with_tools_in_system(p, shown, self.tool_listing) for p in prompts], None

    def grammar(self, tools: Sequence[ToolSchema], role: Role, max_calls: int | None = None,
                env: int | None = None) -> str | None:
        """The grammar a turn of environment `env` is sampled under (at most `max_calls` calls, default the role's;
        the role's answer tool only alone), or None."""
        if not self.constrained or not tools:
            return None

        enums = dict(self.grammar_enums)
        if env is not None and self.env_enums:
            enums.update(dict(self.env_enums[env]))
        if self.live_enums is not None:
            enums.update({k: tuple(v) for k, v in self.live_enums().items()})
        return tool_call_grammar(tools, max_calls=max_calls or role.max_calls_per_turn, free_text=self.free_text,
                                 enums=enums, solo=(role.answer_tool,), max_items=self.max_items)


class _Episode:
    """The state of one running episode (`index`: its environment's place in the batch)."""

    def __init__(self, env: Environment, role: Role, index: int = 0) -> None:
        self.index = index
        self.env = env
        self.role = role
        opening = env.reset()
        self.opening = opening.messages
        self.tools = opening.tools
        self.history: list[Message] = []  # pairs, flattened: assistant, tool, assistant, tool, ...
        task = next((m["content"] for m in opening.messages if m["role"] == "user"), "")
        self.traj = Trajectory(role=role.name, task=task, budget=role.budget, messages=list(opening.messages))
        self.started = time.perf_counter()
        self.done = False

    @property
    def actions_left(self) -> int:
        return self.role.budget - self.traj.actions

    def prompt(self, config: LoopConfig) -> list[Message]:
        if self.role.memory_window is not None:
            keep = 2 * self.role.memory_window
            return self.opening + (self.history[-keep:] if keep else [])
        if config.compactor is not None and sum(len(m["content"]) for m in self.history) > config.compact_at_chars:
            self.history = list(config.compactor(self.history))
            self.traj.compactions += 1
        return self.opening + self.history

    def record(self, sample: Sample, step: Step, wall: float, gen: float, forced: bool = False,
               grammar: str | None = None) -> None:
        results = step.results
        turn = TurnRecord(
            index=len(self.traj.turns), text=sample.text,
            calls=[{"name": c.name, "arguments": c.arguments} for c in step.calls],
            errors=[{"kind": e.kind, "message": e.message} for e in step.errors],
            observation=step.observation, actions=step.actions, failed_calls=sum(not r.ok for r in results),
            chars_read=sum(r.chars for r in results), est_tokens_read=sum(r.est_tokens for r in results),
            nodes_touched=tuple(dict.fromkeys(i for r in results for i in r.nodes_touched)),
            raw_touched=sum(r.raw_touched for r in results), synthetic_touched=sum(r.synthetic_touched for r in results),
            workspace_changed=any(r.changed for r in results), wall_s=wall, generate_s=gen, forced=forced,
            prompt_ids=sample.prompt_token_ids, response_ids=sample.token_ids, logprobs=sample.logprobs,
            finish_reason=sample.finish_reason, grammar=grammar or "",
        )
        self.traj.turns.append(turn)
        pair = [{"role": "assistant", "content": sample.text}, {"role": "tool", "content": step.observation}]
        self.traj.messages.extend(pair)
        self.history.extend(pair)

    def finish(self, end: str, answer: str | None) -> None:
        self.traj.end = end  # type: ignore[assignment]
        self.traj.answer = answer
        self.traj.wall_s = time.perf_counter() - self.started
        self.done = True


def _params(config: LoopConfig, role: Role, turn: int, grammars: Sequence[str | None] = ()) -> SamplingParams:
    """The turn's sampling: one grammar for every prompt, or one each when they differ (`SamplingParams.grammars`)."""
    p = config.params
    stop = tuple(dict.fromkeys(p.stop + role.stop))
    distinct = set(grammars)
    if len(distinct) <= 1:
        one, each = next(iter(distinct), None), None
    elif None in distinct:
        raise ValueError("a turn cannot decode some prompts under a grammar and others without one")
    else:
        one, each = None, tuple(grammars)  # type: ignore[arg-type]
    return replace(p, n=1, stop=stop, seed=None if p.seed is None else p.seed + turn, grammar=one, grammars=each)


def _grammars(episodes: Sequence[_Episode], backend: PolicyBackend, role: Role, config: LoopConfig,
              tools: Sequence[ToolSchema], max_calls: int | None = None) -> list[str | None]:
    """Each episode's grammar for this turn (None without one, or when the backend does not honour grammars)."""
    if not getattr(backend, "honours_grammar", True):
        return [None] * len(episodes)
    return [config.grammar(tools, role, max_calls=max_calls, env=e.index) for e in episodes]


def run_episodes(envs: Sequence[Environment], backend: PolicyBackend, role: Role,
                 config: LoopConfig | None = None) -> list[Trajectory]:
    """Run one episode per environment, generating for all active ones in one batch per turn."""
    config = config or LoopConfig()
    episodes = [_Episode(env, role, i) for i, env in enumerate(envs)]
    if config.env_enums and len(config.env_enums) != len(episodes):
        raise ValueError(f"LoopConfig.env_enums holds {len(config.env_enums)} entries for {len(episodes)} environments")
    turn = 0
    while True:
        active = [e for e in episodes if not e.done]
        if not active:
            break
        prompts = [e.prompt(config) for e in active]
        t0 = time.perf_counter()
        grammars = _grammars(active, backend, role, config, active[0].tools)
        shown, tools = config.listed(prompts, active[0].tools)
        samples = backend.generate(shown, tools, _params(config, role, turn, grammars))
        gen = (time.perf_counter() - t0) / len(active)
        for ep, (sample, *_), grammar in zip(active, samples, grammars, strict=True):
            t1 = time.perf_counter()
            step = ep.env.step(sample.text, ep.actions_left)
            ep.record(sample, step, gen + time.perf_counter() - t1, gen, grammar=grammar)
            if step.terminated:
                ep.finish("answer" if step.answer is not None else "done", step.answer)
            elif ep.actions_left <= 0 and not role.forced_answer:
                ep.finish("budget", None)
        forced = [e for e in episodes if not e.done and e.actions_left <= 0]
        if forced:
            _force_answers(forced, backend, role, config, turn + 1)
        turn += 1
    return [e.traj for e in episodes]


def _force_answers(episodes: list[_Episode], backend: PolicyBackend, role: Role, config: LoopConfig,
                   turn: int) -> None:
    """One more turn, answer tool only, for episodes whose budget ran out."""
    note = {"role": "user", "content": FORCE_ANSWER.format(budget=role.budget, tool=role.answer_tool)}
    prompts = [e.prompt(config) + [note] for e in episodes]
    t0 = time.perf_counter()
    tools = episodes[0].env.answer_tools()
    grammars = _grammars(episodes, backend, role, config, tools, max_calls=1)
    shown, listed_tools = config.listed(prompts, tools)
    samples = backend.generate(shown, listed_tools, _params(config, role, turn, grammars))
    gen = (time.perf_counter() - t0) / len(episodes)
    for ep, (sample, *_), grammar in zip(episodes, samples, grammars, strict=True):
        ep.traj.messages.append(note)
        step = ep.env.final_answer(sample.text)
        ep.record(sample, step, gen, gen, forced=True, grammar=grammar)
        ep.finish("forced_answer", step.answer)


def run_episode(env: Environment, backend: PolicyBackend, role: Role, config: LoopConfig | None = None) -> Trajectory:
    """One episode."""
    return run_episodes([env], backend, role, config)[0]
