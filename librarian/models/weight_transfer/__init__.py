"""Weight transfer: how published weights travel from the learner to a rollout backend, both ends of each wire.

`rollout.options.weight_transfer` picks the way once per run:

- LoRA adapters and 'file' (`payloads`): a published payload (the learner's `WeightsPayload`) becomes what a
  vLLM engine loads, a peft-format adapter folder or one safetensors file of full weights;
- 'ipc' (`payloads`): CUDA IPC handles of the learner's own GPU tensors, for an engine on the learner's node
  (`this_node`, `check_same_node`);
- 'nccl' (`nccl`): full weights broadcast from the learner to every engine's tensor-parallel shards in packed
  buffers, on vLLM's own weight-transfer wire spoken with torch alone (the trainer's half; the engine's half is
  vLLM's, and `accept_init_info` checks the NCCL versions before it joins);
- 'broadcast' (`gloo`): the same packed buffers over gloo to `hf` models on any device, both ends here;
  `make_sender` gives the learner the sender of either wire.

Why here, in `models` (layer 1): the receiving end is a policy backend (`vllm_engine` joins the NCCL group,
`vllm_backend` writes adapter folders and opens IPC handles), so the wire must sit at or below `models`; it
needs `models.base`'s `BackendError` and `vllm_protocol`'s packing, so it cannot sit below `models` either.
The learner (4) and the cluster (6) use it from above. What needs a higher layer stays in it: the learner's
weights as a payload and their loading into an `hf` model (`learner/weights.py`, which wraps LoRA as the
learner does) and the Ray orchestration, who publishes when, the object-store box, building and rebuilding a
broadcast group, a missed worker's one pull, bounded waits (`cluster/weight_sync.py`, on Ray actors and
`cluster.waits`).

Importing this package imports nothing; its modules import torch only inside the functions that need it, so
the `vllm` backend modules import without torch or vLLM.
"""
