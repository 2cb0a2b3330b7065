"""Unbiased pass@k (the Codex estimator, Chen et al. 2021), computed in its numerically stable form."""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples, c correct, is correct).

    1 - C(n-c, k) / C(n, k), evaluated as 1 - prod_{i=n-c+1}^{n} (1 - k / i).
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"pass_at_k: {name} must be an integer (got {v!r})")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n (got n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n (got k={k}, n={n})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(samples: Sequence[tuple[int, int]], k: int) -> float:
    """pass@k averaged over questions, each given as (n samples, c correct)."""
    if not samples:
        raise ValueError("mean_pass_at_k needs at least one (n, c) pair")
    return sum(pass_at_k(n, c, k) for n, c in samples) / len(samples)
