"""Online curation: a served workspace that curates itself from the questions readers ask.

`workspace` (the versions served, curation rounds, swaps), `curation` (a round: backward passes on a copy,
the check on held-back questions), `versions` (versions on disk), `log` (the append-only Parquet log), `policy`
(a role's backend and sampling). Library code: `app` (`serve --curate`, `rollback`) and the `evaluate_online`
pipeline both use it; it imports no pipeline and no `rl`.
"""
