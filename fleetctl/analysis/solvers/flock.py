"""Flock-style likelihood search (Harsh et al., SIGCOMM'23), for flows whose path is not known.

Each row is one flow with, per link, the probability w that it crosses it (1/0 when traced, the
ECMP split when not). Hypothesis: a set H of faulty links, each flagging a flow that crosses it with
probability d; any flow is flagged by noise with probability eps. Then
    P(flow bad) = 1 - (1 - eps) * prod_{e in H} (1 - d w_e).
Greedy search: add the link (and d from a small grid) with the largest log-likelihood gain while
the gain beats a penalty that grows with the number of candidate links (a Bonferroni-like price,
so a clean run, with its scattered noise flags, stays empty). Unlike least squares on expected
rows, it uses what each flow says on its own: flows of one pair that hash onto the bad link fail,
the others do not.
"""

from __future__ import annotations

import numpy as np

from fleetctl.analysis.solvers import register
from fleetctl.analysis.solvers.base import Problem, Solver

DETECT = (0.25, 0.5, 0.75, 0.95)  # grid of d: share of the flows over a bad link that look bad
MIN_EPS, MAX_EPS = 1e-4, 0.2


@register
class FlockSolver(Solver):
    name = "flock"
    description = "greedy maximum-likelihood fault sets over per-flow candidate paths (Flock)"
    max_faults = 8
    penalty = 12.0  # nats on top of log(#links): the evidence a new fault must bring

    def blame(self, problem: Problem) -> dict[int, float]:
        bad = problem.bad.astype(bool)
        if not bad.any() or problem.A.shape[0] == 0:
            return {}
        # only links crossed by some bad flow can gain likelihood: solve over those alone
        touched = np.flatnonzero(problem.A[bad].sum(axis=0).A1 > 0)
        a = problem.A[:, touched].tocsc()
        n_rows, n_cols = a.shape
        rows = a.indices  # row of each non-zero, column-major
        cols = np.repeat(np.arange(n_cols), np.diff(a.indptr))
        w = a.data
        eps = float(np.clip(bad.mean(), MIN_EPS, MAX_EPS))
        p_ok = np.full(n_rows, 1.0 - eps)  # P(flow not flagged) under the current hypothesis
        price = self.penalty + np.log(max(2, problem.A.shape[1]))
        chosen: dict[int, float] = {}
        for _ in range(self.max_faults):
            gain, d = self._best_gains(p_ok, bad, rows, cols, w, n_cols)
            gain[np.isin(touched, list(chosen))] = -np.inf
            top = int(np.argmax(gain))
            if gain[top] <= price:
                break
            col = slice(a.indptr[top], a.indptr[top + 1])
            p_ok[a.indices[col]] *= 1.0 - d[top] * a.data[col]
            hit = np.zeros(n_rows, dtype=bool)
            hit[a.indices[col][a.data[col] > 0]] = True
            hit &= bad
            if hit.sum() < problem.th.min_bad_paths:
                break
            chosen[int(touched[top])] = float(np.median(problem.y[hit]))
            if len(chosen) == 1:  # noise rate from the flows the first fault cannot touch
                outside = np.ones(n_rows, dtype=bool)
                outside[a.indices[col]] = False
                if outside.any():
                    new_eps = float(np.clip(bad[outside].mean(), MIN_EPS, MAX_EPS))
                    p_ok *= (1.0 - new_eps) / (1.0 - eps)
                    eps = new_eps
        return chosen

    @staticmethod
    def _best_gains(p_ok, bad, rows, cols, w, n_cols):
        """Log-likelihood gain of adding each link, maximised over the detection grid."""
        best = np.full(n_cols, -np.inf)
        best_d = np.zeros(n_cols)
        q_old = p_ok[rows]
        b = bad[rows]
        for d in DETECT:
            q_new = q_old * (1.0 - d * w)
            with np.errstate(divide="ignore"):
                term = np.where(b, np.log1p(-q_new) - np.log1p(-q_old),
                                np.log(np.maximum(q_new, 1e-300)) - np.log(q_old))
            g = np.bincount(cols, weights=term, minlength=n_cols)
            better = g > best
            best[better] = g[better]
            best_d[better] = d
        return best, best_d
