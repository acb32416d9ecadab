"""The statistics of blame (docs/blame.md, "Method"): how sure a flip rate is, and which steps stand out.

A step's K trials give flips, no-flips and undefined outcomes; only the first two are
gradable. ``step_stats`` turns the counts into a flip rate with a Wilson score interval and an
exact Clopper-Pearson interval, and a one-sided binomial p-value against a null flip rate (how
often perturbing a step that decided nothing still flips the outcome). ``summarize`` corrects the
p-values of all steps with enough gradable trials for multiple testing (Benjamini-Hochberg) and
labels each step. Pure arithmetic on numbers: no git, no files, no processes.
"""
from __future__ import annotations

import math
from statistics import NormalDist

LABELS = ("decisive", "suggestive", "none", "insufficient")


def _z(conf: float) -> float:
    if not 0 < conf < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {conf}")
    return NormalDist().inv_cdf(1 - (1 - conf) / 2)


def _check(k: int, n: int) -> None:
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, not k={k}, n={n}")


def wilson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a rate of ``k`` in ``n`` ((0, 1) when n is 0)."""
    _check(k, n)
    if n == 0:
        return (0.0, 1.0)
    z = _z(conf)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def _pmf(i: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 1.0 if i == 0 else 0.0
    if p >= 1.0:
        return 1.0 if i == n else 0.0
    log = (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
           + i * math.log(p) + (n - i) * math.log1p(-p))
    return math.exp(log)


def _at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return min(1.0, sum(_pmf(i, n, p) for i in range(k, n + 1)))


def _at_most(k: int, n: int, p: float) -> float:
    return min(1.0, sum(_pmf(i, n, p) for i in range(0, k + 1)))


def _solve(f, target: float) -> float:
    """The p in [0, 1] where the monotone increasing ``f`` reaches ``target`` (bisection to 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate of ``k`` in ``n`` ((0, 1) when n is 0)."""
    _check(k, n)
    _z(conf)
    if n == 0:
        return (0.0, 1.0)
    a = (1 - conf) / 2
    lo = 0.0 if k == 0 else _solve(lambda p: _at_least(k, n, p), a)
    hi = 1.0 if k == n else _solve(lambda p: 1 - _at_most(k, n, p), 1 - a)
    return (lo, hi)


def binom_p_value(k: int, n: int, p0: float) -> float:
    """One-sided p-value of ``k`` flips in ``n`` trials against a null flip rate ``p0``: P(X >= k)."""
    _check(k, n)
    if not 0 <= p0 <= 1:
        raise ValueError(f"a null rate must be between 0 and 1, not {p0}")
    return _at_least(k, n, p0)


def benjamini_hochberg(p: list[float | None]) -> list[float | None]:
    """Benjamini-Hochberg q-values of the p-values given (None, a step not tested, stays None)."""
    tested = sorted((v, i) for i, v in enumerate(p) if v is not None)
    m = len(tested)
    q: list[float | None] = [None] * len(p)
    running = 1.0
    for rank in range(m, 0, -1):
        value, i = tested[rank - 1]
        running = min(running, value * m / rank)
        q[i] = min(1.0, running)
    return q


def step_stats(step: int, flips: int, no_flips: int, undefined: int, *, null_rate: float,
               alpha: float = 0.05, min_valid: int = 3) -> dict:
    """One step's row (docs/blame.md, "Method"): counts, rate, intervals and p-value; q and label
    come from ``summarize``. Fewer than ``min_valid`` gradable trials: no rate is claimed."""
    n = flips + no_flips
    row = {"step": step, "trials": n + undefined, "flips": flips, "no_flips": no_flips, "undefined": undefined,
           "rate": None, "wilson": None, "clopper_pearson": None, "p": None, "q": None, "label": "insufficient"}
    if n >= max(1, min_valid):
        conf = 1 - alpha
        row.update(rate=flips / n, wilson=list(wilson(flips, n, conf)),
                   clopper_pearson=list(clopper_pearson(flips, n, conf)),
                   p=binom_p_value(flips, n, null_rate), null_rate=null_rate)
    return row


def summarize(steps: list[dict], *, alpha: float = 0.05) -> tuple[list[dict], int | None]:
    """The rows with q-values and labels, and the decisive step: the LAST step labelled decisive
    (the point of no return: no later change of a response flips the outcome), or None."""
    q = benjamini_hochberg([row["p"] for row in steps])
    out = []
    for row, qv in zip(steps, q):
        row = dict(row, q=qv)
        if row["p"] is not None:
            if qv <= alpha and row["wilson"][0] > row.get("null_rate", 0.0):
                row["label"] = "decisive"
            elif row["p"] <= alpha:
                row["label"] = "suggestive"
            else:
                row["label"] = "none"
        out.append(row)
    decisive = [row["step"] for row in out if row["label"] == "decisive"]
    return out, (max(decisive) if decisive else None)
