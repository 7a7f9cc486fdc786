"""Significance of network findings, with control of the false-discovery rate over all elements.

Each candidate finding is tested against the clean paths (those not through its element and not
bad themselves):
- loss: one-sided binomial test of the probes lost through the element against the clean
  paths' loss rate, (lost + 0.5) / (sent + 1) so a loss-free background is small but not zero;
- delay (and a loss finding without probe counts): binomial test of its bad-path count against
  the share of bad paths elsewhere.
Many elements are tested in every window and metric: Benjamini-Hochberg over `tests` hypotheses
keeps the expected share of false findings among those raised below `fdr`. A finding carries
`significance` = {test, p_value, q_value, fdr, tests, confidence_pct}; confidence_pct is
100 (1 - q).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

DEFAULT_FDR = 0.01


def p_value(f: dict) -> float:
    ev = f.get("evidence") or {}
    if f.get("metric") in ("loss", "down") and ev.get("probes_through"):
        n, k = int(ev["probes_through"]), int(ev.get("lost_through", 0))
        bg = (ev.get("lost_clean_outside", 0) + 0.5) / (ev.get("probes_clean_outside", 0) + 1.0)
        return float(binom.sf(k - 1, n, min(bg, 0.5)))
    n, k = int(ev.get("paths_through", 0)), int(ev.get("paths_bad", 0))
    bg = max(float(ev.get("background_bad_share", 0.0)), 1e-3)
    return float(binom.sf(k - 1, n, min(bg, 0.5))) if n else 1.0


def benjamini_hochberg(p: np.ndarray, tests: int) -> np.ndarray:
    """q-values of the p-values `p` among `tests` hypotheses (tests >= len(p); the untested rest
    count as p = 1)."""
    p = np.asarray(p, dtype=np.float64)
    m = max(int(tests), p.size, 1)
    if p.size == 0:
        return p
    order = np.argsort(p)
    ranked = p[order] * m / np.arange(1, p.size + 1)
    q = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty_like(p)
    out[order] = np.minimum(q, 1.0)
    return out


def significant(findings: list[dict], tests: int, fdr: float = DEFAULT_FDR
                ) -> tuple[list[dict], list[dict]]:
    """(kept, dropped): network findings whose q-value is at most `fdr`, each with its
    `significance`; findings of another category (probe warnings) pass untouched."""
    net = [f for f in findings if f.get("category", "network") == "network"
           and "check" not in (f.get("evidence") or {})]
    other = [f for f in findings if not any(f is g for g in net)]
    p = np.array([p_value(f) for f in net])
    q = benjamini_hochberg(p, tests)
    kept, dropped = [], []
    for f, pv, qv in zip(net, p, q):
        f["significance"] = {"test": "binomial vs clean paths", "p_value": float(f"{pv:.3g}"),
                             "q_value": float(f"{qv:.3g}"), "fdr": fdr, "tests": int(tests),
                             "confidence_pct": round(100 * (1 - qv), 4)}
        (kept if qv <= fdr else dropped).append(f)
    return kept + other, dropped
