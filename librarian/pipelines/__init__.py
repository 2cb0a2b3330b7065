"""Pipelines: one readable recipe per command, wiring components named in config.

One sub-package per recipe family: `builder` (`train_builder`), `researcher` (`train_researcher`), `curator`
(`train_curator`), `evaluate` (`evaluate`, `evaluate_memory`, `evaluate_online`), `ablate` (sweeps) and `demo`.
Shared: `registry` (every `librarian` command, and the pipelines `ablate` sweeps and `plan` validates),
`entry` (`pipeline_main`: the CLI around a config and `run`), `scaffold` (the non-RL run frame), `keys_help`
(descriptions of shared keys) and `plan_command` (`librarian plan`). The RL recipes run on `librarian.rl`.
"""
