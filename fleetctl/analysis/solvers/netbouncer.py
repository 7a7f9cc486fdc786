"""NetBouncer-style link success estimation (Tan et al., NSDI'19).

A path delivers with probability s_j = prod_i x_i over its links. NetBouncer first clears every
device on a fully good path, then minimises sum_j (s_j - prod x_i)^2 + lam * sum_i x_i (1 - x_i)
by coordinate descent, x in [0, 1]; the regulariser pushes each x to 0 or 1.

Here the clearing step is the shared suspect reduction (tomography.reduce), s_j = exp(-y_j): the
measured delivery rate for loss, and about 0 for a delayed path (its y is microseconds), so a delay
problem becomes a binary good/bad one. A link is blamed when 1 - x_i is at least 30 % of the median
failure rate of its bad paths, with the median y of those paths as its magnitude.
"""

from __future__ import annotations

import numpy as np

from fleetctl.analysis.solvers import register
from fleetctl.analysis.solvers.base import Problem, Solver
from fleetctl.analysis.solvers.tomography import _bounded_rows, reduce

FLOOR = 1e-6  # x never reaches 0 exactly: log(x) stays finite


@register
class NetBouncerSolver(Solver):
    name = "netbouncer"
    description = "NetBouncer: fit link success rates x with prod-x paths, coordinate descent"
    lam = 0.5
    sweeps = 30

    def blame(self, problem: Problem) -> dict[int, float]:
        cand, rows, sub = reduce(problem)
        if cand.size == 0:
            return {}
        rows, sub = _bounded_rows(problem, rows, sub)
        member = sub.toarray() > 0  # rows x suspects
        s = np.exp(-problem.y[rows])
        x = np.ones(cand.size)
        for _ in range(self.sweeps):
            before = x.copy()
            for i in range(cand.size):
                on = member[:, i]
                if not on.any():
                    continue
                others = np.where(member[on], x, 1.0)
                others[:, i] = 1.0
                p = others.prod(axis=1)
                num = 2.0 * np.dot(p, s[on]) - self.lam
                den = 2.0 * np.dot(p, p) - 2.0 * self.lam
                if den > 0:  # convex in x_i: the stationary point, clipped
                    x[i] = np.clip(num / den, FLOOR, 1.0)
                else:  # concave: the better end point, f(1) - f(0) = sum p^2 - 2 sum p s
                    x[i] = 1.0 if np.dot(p, p) - 2.0 * np.dot(p, s[on]) < 0 else FLOOR
            if np.max(np.abs(x - before)) < 1e-6:
                break
        # blamed when its failure rate 1 - x is a fair part of the failure of its bad paths;
        # magnitude in the problem's own units (like vote): the median y of those paths
        bad = problem.bad[rows]
        fail = 1.0 - s
        out = {}
        for i in range(cand.size):
            hit = member[:, i] & bad
            if hit.sum() >= problem.th.min_bad_paths and 1.0 - x[i] >= 0.3 * np.median(fail[hit]):
                out[int(cand[i])] = float(np.median(problem.y[rows][hit]))
        return out
