"""007-style voting (Arzani et al., NSDI'18), the cheap baseline.

Each bad path gives 1/h of a vote to each of the h link directions it crosses (for an untraced
flow, in proportion to the probability of crossing). The top link is blamed, the bad paths it
explains are dropped, and the vote repeats. Plain 007 never looks at clean paths; this one adds one
guard so that it does not blame a link that mostly carries clean paths (a clean lab must give no
finding): the top link must be bad on at least `candidate_share` of its paths not yet explained.
"""

from __future__ import annotations

import numpy as np

from fleetctl.analysis.solvers import register
from fleetctl.analysis.solvers.base import Problem, Solver


@register
class VoteSolver(Solver):
    name = "vote"
    description = "007 voting: 1/h vote per link of each bad path, blame the top, repeat"
    max_rounds = 64

    def blame(self, problem: Problem) -> dict[int, float]:
        a = problem.A
        _, n_all = problem.column_counts()
        remaining = problem.bad.copy()
        hops = np.asarray(a.sum(axis=1)).ravel()
        inv_h = np.where(hops > 0, 1.0 / np.maximum(hops, 1e-12), 0.0)
        a_t = a.T.tocsr()
        a_csc = a.tocsc()
        blamed = np.zeros(a.shape[1], dtype=bool)
        out: dict[int, float] = {}
        for _ in range(self.max_rounds):
            if not remaining.any():
                break
            votes = a_t @ (remaining * inv_h)
            # share of a link's still-unexplained paths that are bad: once the culprit's paths
            # are explained, its innocent neighbours on those paths are left with clean ones
            n_bad = a_t @ remaining.astype(np.float64)
            n_open = n_all - a_t @ (problem.bad & ~remaining).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(n_open > 0, n_bad / n_open, 0.0)
            votes[(share < problem.th.candidate_share) | blamed] = 0.0
            top = int(np.argmax(votes))
            if votes[top] <= 0:
                break
            col = a_csc.getcol(top)
            explained = np.zeros_like(remaining)
            explained[col.indices[col.data > 0]] = True
            explained &= remaining
            if explained.sum() < problem.th.min_bad_paths:
                break
            out[top] = float(np.median(problem.y[explained]))
            remaining &= ~explained
            blamed[top] = True
        return out
