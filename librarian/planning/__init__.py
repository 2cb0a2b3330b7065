"""`librarian plan`'s planning: where a job's actors would land on a cluster file's node types and whether each
GPU's memory holds them, computed without starting anything.

`job_plan` makes the report (`place_job(job, cluster)`, `render`) from `cluster_file` (what a cluster file declares:
node types, GPUs and their memory, images, shared volumes), `placement` (a small model of Ray's scheduling and
autoscaling), `memory_estimate` (a learner rank's memory per GPU, the widest phase of an update, from the terms
of `activation_memory`), `vllm_memory` (a vLLM engine's), `model_shape` and `model_lookup` (a model's sizes) and
`memory_check` (does a learner rank fit its GPU, alone or colocated, and what would make it fit);
`memory_meter` measures a real step by the estimate's phases (`scripts/gpu_check.py`, the tests).

A command, not an actor: it sits one layer above `cluster`, whose settings it reads (`topology`'s colocated
share and `RayConfig`, `actor_pool`'s start timeout), and below `rl`, whose config check refuses a GPU job that
`memory_check` says does not fit before Ray starts, and `pipelines` (`pipelines/plan_command.py`, the command).
Importing this package imports nothing else, and `model_shape`, `activation_memory` and `memory_estimate` import
only the standard library, so `scripts/gpu_check.py` can use them on a bare GPU machine (no OmegaConf there).
"""
