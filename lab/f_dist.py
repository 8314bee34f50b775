"""The F distribution's upper tail for the lab's tests, without SciPy (the lab runs on the
system's Python): P(F on d1 and d2 degrees of freedom > f) through the regularized incomplete
beta function, I_x(a, b) with x = d2 / (d2 + d1 f), a = d2 / 2, b = d1 / 2 (Abramowitz and
Stegun 26.6.2), evaluated by its continued fraction (Numerical Recipes, 6.4)."""

from __future__ import annotations

import math


def beta_reg(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (modified Lentz's method), on the side of x where that converges fast."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1 - beta_reg(1 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log(1 - x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1 + num * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(c * d - 1) < 1e-12:
            break
    return front * (f - 1)


def f_sf(f: float, d1: int, d2: int) -> float:
    """P(F on d1 and d2 degrees of freedom > f)."""
    return beta_reg(d2 / (d2 + d1 * f), d2 / 2, d1 / 2)
