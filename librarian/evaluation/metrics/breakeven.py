"""Break-even query volume (paper 001, Eq. 2): N* = C_train / (c0 - cT).

Sign convention: `c0` is the per-question cost on the untrained store and
`cT` on the trained one, so a saving is c0 - cT > 0. With no saving
(cT >= c0) curation never pays for itself and `break_even` returns None;
with no training cost it pays for itself at once (0.0).
"""

from __future__ import annotations

import math


def break_even(c_train: float, c0: float, c_t: float) -> float | None:
    """Questions after which training cost `c_train` is repaid by the per-question saving c0 - cT.

    Returns None when there is no saving (cT >= c0), or one so small that N* overflows:
    the break-even point is infinite.
    """
    for name, v in (("c_train", c_train), ("c0", c0), ("c_t", c_t)):
        if not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"break_even: {name} must be a finite number (got {v!r})")
        if v < 0:
            raise ValueError(f"break_even: {name} is a cost and must be >= 0 (got {v})")
    saving = c0 - c_t
    if saving <= 0:
        return None
    n = c_train / saving
    return n if math.isfinite(n) else None  # a saving too small to represent the quotient
