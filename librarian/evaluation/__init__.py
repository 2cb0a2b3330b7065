"""Evaluation: metrics (rho, coverage, index quality, the key-coverage gradient, break-even,
amortization, pass@k, bootstrap CIs, structure and reading statistics) and plots; exam summaries and the
comparison with the flat store (`exam`; the answerer probe that grades an exam is `rewards.probe_exam`),
the baseline stores, the researcher's arms (`memory_*`) and the HTML report."""
