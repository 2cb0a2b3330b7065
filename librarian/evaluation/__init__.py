"""Evaluation: metrics (rho, coverage, index quality, the key-coverage gradient, break-even,
amortization, pass@k, bootstrap CIs, structure and reading statistics) and plots."""
