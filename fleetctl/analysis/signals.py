"""From per-path window figures to per-path signals: which paths are bad, and by how much.

Thresholds are robust on purpose: a real fabric has microseconds of jitter and rare single losses,
and a run without a fault must give no finding. A path is
- down when it sent enough probes and none came back,
- lossy when it lost at least `min_lost` probes and that many losses are somewhat unlikely under
  the background rate (binomial tail below `path_alpha`: with 100 probes one loss is enough, with
  1,000 it takes three). Single drops are filtered again at the element: a finding needs the
  pooled loss of its bad paths to be improbable under the background rate (tail below
  `loss_alpha`),
- delayed when its excess delay over the baseline exceeds both an absolute floor and a robust
  z-score of all paths' excess delays in the window (centre and scale from the lower quantiles).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from fleetctl.model.fabric import WindowStats


@dataclass(frozen=True)
class Thresholds:
    min_probes: int = 5  # a path with fewer probes in a window says nothing
    background_loss: float = 1e-3  # loss rate assumed healthy (rare single drops)
    loss_alpha: float = 1e-6  # binomial tail of an element's pooled loss, below = significant
    min_lost: int = 1  # a path with at least this many lost probes is lossy ...
    path_alpha: float = 0.1  # ... if that many losses have a background tail below this
    delay_floor_us: float = 20.0  # excess delay below this is never a fault
    delay_z: float = 6.0  # robust z-score of excess delay
    min_bad_paths: int = 2  # a finding needs at least this many bad paths
    min_confidence: float = 0.4  # ... and this confidence (before sharing it among twins)
    element_alpha: float = 1e-3  # ... and bad paths improbable under the background bad share
    explain_alpha: float = 1e-2  # one fault 1/this times likelier than another on their own paths explains it
    candidate_share: float = 0.3  # element kept as a suspect when this share of its paths is bad
    switch_bad_share: float = 0.8  # switch blamed when this share of its paths is bad ...
    switch_min_links: int = 3  # ... and at least this many of its link directions are blamed
    # pooled loss (step.pooled_loss_blame), when too few probes per path show a loss path by path:
    pooled_min_loss: float = 0.005  # an element's pooled loss below this is never a fault ...
    pooled_min_lost: int = 5  # ... nor fewer probes lost through it
    pooled_max_faults: int = 4  # elements blamed per window at most


@dataclass
class PathSignals:
    """One window's verdict per path. y_* are the additive magnitudes tomography fits."""

    valid: np.ndarray  # bool: enough probes
    down: np.ndarray
    lossy: np.ndarray  # includes down
    delayed: np.ndarray
    loss_rate: np.ndarray
    y_loss: np.ndarray  # -log(1 - loss) on lossy paths, 0 elsewhere
    excess_us: np.ndarray  # excess delay, NaN where unknown
    y_delay: np.ndarray  # excess on delayed paths, 0 elsewhere
    sent: np.ndarray
    lost: np.ndarray


PEER_QUANTILE = 25.0  # percentile of a hop class's own baselines that stands for the class


def column_nanquantile(x: np.ndarray, q: float) -> np.ndarray:
    """np.nanquantile(x, q, axis=0) (linear interpolation), NaN for an all-NaN column, without
    numpy's per-column Python loop (4 s for 55,000 paths)."""
    s = np.sort(x, axis=0)  # NaN sorts last
    n = np.isfinite(x).sum(axis=0)
    pos = q * np.maximum(n - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    cols = np.arange(x.shape[1])
    v_lo, v_hi = s[lo, cols], s[hi, cols]
    out = v_lo + (v_hi - v_lo) * (pos - lo)
    out[n == 0] = np.nan
    return out


def path_baseline(stats: WindowStats, hop_class: np.ndarray, min_probes: int = 1) -> np.ndarray:
    """Healthy delay per path: the lower of its own low quantile over windows and the median of
    paths of the same hop class, so a fault that lasts the whole run still stands out. Windows
    where the path had fewer than `min_probes` probes, or under a quarter of its fullest window,
    do not count: the p99 of a handful of probes (the tail of a run, seen by hosts whose clocks
    run ahead) is near their median, and would make every full window of that path look slow."""
    full = np.maximum(min_probes, 0.25 * stats.sent.max(axis=0))
    delay = np.where(stats.sent >= full, stats.delay, np.nan)
    own = column_nanquantile(delay, 0.1) if stats.n_windows > 1 else delay[0].copy()
    peer = np.full_like(own, np.nan)
    for cls in np.unique(hop_class):
        members = hop_class == cls
        vals = own[members]
        if np.any(np.isfinite(vals)):
            # the lower quartile, not the median: with two spines a slow spine carries half of
            # a hop class's paths, and the median then sits on a slow path (missed in 15 of 33
            # switch delays once ECMP was hashed per switch, benchmarks/triangulation.py)
            peer[members] = np.nanpercentile(vals, PEER_QUANTILE)
    base = np.fmin(own, peer)
    if stats.baseline is not None:
        base = np.fmin(base, np.asarray(stats.baseline, dtype=np.float64))
    return base


def window_signals(sent: np.ndarray, lost: np.ndarray, delay: np.ndarray, baseline: np.ndarray,
                   th: Thresholds) -> PathSignals:
    sent = np.asarray(sent, dtype=np.int64)
    lost = np.asarray(lost, dtype=np.int64)
    valid = sent >= th.min_probes
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(sent > 0, lost / np.maximum(sent, 1), 0.0)
    down = valid & (lost == sent)
    # P(X >= lost) under the background, only where it can matter: a window's paths with a loss
    # are a few hundred of 495,000 at 1,280 x 8 (13 -> 1 ms)
    tail = np.ones(sent.shape)
    cand = valid & (lost >= th.min_lost)
    tail[cand] = binom.sf(lost[cand] - 1, sent[cand], th.background_loss)
    lossy = cand & (tail < th.path_alpha) | down
    y_loss = np.where(lossy, -np.log1p(-np.minimum(rate, 0.999)), 0.0)

    excess = delay - baseline
    ok = valid & np.isfinite(excess) & ~down
    delayed = np.zeros_like(valid)
    if np.any(ok):
        # Noise scale from the lower quantiles only: a fault may delay over half of the paths
        # (a spine of a 2-spine fabric), which would inflate a plain median/MAD.
        q05, q25 = np.quantile(excess[ok], [0.05, 0.25])
        sigma = (q25 - q05) / 0.971  # Gaussian: q25 - q05 = 0.971 sigma
        centre = q25 + 0.674 * sigma
        limit = max(th.delay_floor_us, centre + th.delay_z * sigma)
        delayed[ok] = excess[ok] > limit
    y_delay = np.where(delayed, np.nan_to_num(excess), 0.0)
    return PathSignals(valid, down, lossy, delayed, rate, y_loss, excess, y_delay, sent, lost)
