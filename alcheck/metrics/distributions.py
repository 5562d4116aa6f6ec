"""Normal and Student-t tail probabilities and quantiles, without scipy.

Student's t CDF goes through the regularised incomplete beta function,
    P(|T| > t) = I_x(df/2, 1/2),  x = df / (df + t^2),
evaluated with the modified Lentz continued fraction. df = None (or inf) means the normal.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_NORMAL = NormalDist()


def normal_cdf(z: float) -> float:
    return _NORMAL.cdf(z)


def normal_quantile(p: float) -> float:
    return _NORMAL.inv_cdf(p)


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _is_normal(df) -> bool:
    return df is None or math.isinf(df) or df > 1e7


def t_cdf(t: float, df: float | None) -> float:
    """P(T <= t) for Student's t with df degrees of freedom (None: standard normal)."""
    if math.isnan(t):
        return float("nan")
    if _is_normal(df):
        return normal_cdf(t)
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float | None) -> float:
    """The p-quantile of Student's t (bisection on t_cdf; exact to ~1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level must lie in (0, 1), got {p}")
    if _is_normal(df):
        return normal_quantile(p)
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)
