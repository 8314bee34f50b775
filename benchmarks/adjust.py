"""The effect adjusted for a covariate: the CPUs' speed (speed.py), added to the model
stats.paired_effect fits, by ordinary least squares.

The model is paired_effect's own (one level; a level per server placement; a line over the
run per placement) with one more term, a common slope on z, the log ratio of the speeds of
the CPUs B's and A's runs sat on: the analysis of covariance (Montgomery, Design and
Analysis of Experiments, 8th ed., chapter 15.3). The effect is the model's value where the
CPUs ran alike (z = 0), weighted over the placements as paired_effect weights them, with
variance s^2 c'(X'X)^-1 c on n - p degrees of freedom (Montgomery, Peck and Vining,
Introduction to Linear Regression Analysis, 5th ed., 3.4 and 3.5). The covariate is read
by a probe beside the servers, not by them, so the variants cannot move it: the adjustment
removes noise, not effect. Where the CPUs' speeds barely vary, the adjustment would move the
estimate little and cost a degree of freedom and some width, so paired_effect does not call
it there (stats.SPEED_MIN_SD)."""

from __future__ import annotations

import math


def ols(rows: list[list[float]], y: list[float]) -> tuple[list[float], list[list[float]],
                                                         float] | None:
    """Least squares of y on the columns of rows: the coefficients, (X'X)^-1 and the residual
    sum of squares; None where X'X is singular (a column that never varies)."""
    p = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(p)]
         + [1.0 if i == j else 0.0 for j in range(p)] for i in range(p)]
    scale = max(abs(a[i][i]) for i in range(p)) or 1.0
    for col in range(p):  # Gauss-Jordan with partial pivoting
        piv = max(range(col, p), key=lambda i: abs(a[i][col]))
        if abs(a[piv][col]) < 1e-12 * scale:
            return None
        a[col], a[piv] = a[piv], a[col]
        f = a[col][col]
        a[col] = [v / f for v in a[col]]
        for i in range(p):
            if i != col and a[i][col]:
                g = a[i][col]
                a[i] = [v - g * w for v, w in zip(a[i], a[col])]
    inv = [row[p:] for row in a]
    xty = [sum(r[i] * v for r, v in zip(rows, y)) for i in range(p)]
    beta = [sum(inv[i][j] * xty[j] for j in range(p)) for i in range(p)]
    rss = sum((v - sum(b * x for b, x in zip(beta, r))) ** 2 for r, v in zip(rows, y))
    return beta, inv, rss


def adjusted(groups: dict, drift: bool, at: float) -> tuple[float, float, int, float] | None:
    """groups: placement -> [(time, ln ratio, z)], as paired_effect groups them (one group:
    the plain paired model). The effect at z = 0 (the placements' levels weighted alike, at
    time `at` where drift fits a line per placement), its standard error, degrees of freedom
    and the slope on z; None where the model cannot be fitted."""
    k = len(groups)
    width = 2 if drift else 1
    rows, y, c = [], [], []
    for j, g in enumerate(groups.values()):
        mt = sum(t for t, _, _ in g) / len(g)
        c += [1 / k, (at - mt) / k] if drift else [1 / k]
        for t, x, z in g:
            row = [0.0] * (width * k)
            row[width * j] = 1.0
            if drift:
                row[width * j + 1] = t - mt
            rows.append(row + [z])
            y.append(x)
    c.append(0.0)
    n, p = len(y), len(c)
    fit = ols(rows, y)
    if fit is None or n <= p:
        return None
    beta, inv, rss = fit
    var = rss / (n - p) * sum(c[i] * inv[i][j] * c[j] for i in range(p) for j in range(p))
    return sum(ci * b for ci, b in zip(c, beta)), math.sqrt(max(var, 0.0)), n - p, beta[-1]
