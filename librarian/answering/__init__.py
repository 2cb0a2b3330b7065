"""Questions answered over a built workspace by a reader role: what `librarian ask`, `librarian serve` and the
online server share.

- `config`: `AskConfig` (reader, backend, budget, batch) and `AskItem` (a question, its golds);
- `readers`: which reader a workspace gets (`default_reader`) and its role;
- `backends`: the reader's backend, a progress bar over model calls, the model that writes answers from passages;
- `records`: one answered question as a JSON record (answer, F1, files read, provenance, costs), `summarise`;
- `answer`: `answer(opened, items, cfg)`, the batched episodes and their records.

The `ask` command (its flags, the printed answers, the out folder) is `librarian.app.ask`.
"""
