"""Sparse non-negative tomography: y = A x, x >= 0, few non-zero x.

Both solvers first shrink the problem to the suspect columns (Problem.candidates: elements crossed
mostly by bad paths) and the rows that cross them, bad and clean: the clean rows are what pins an
innocent neighbour to zero. On a 10,000-link fabric a fault leaves tens of suspects, so the solve is
small however large the fabric is.

- `nnls`: least squares with x >= 0 (scipy nnls, or lsq_linear on large sparse systems), then
  Occam pruning: a column is kept only if it explains a fair part of the signal of its bad paths.
- `l1`: least absolute deviations plus an L1 price on x, as one linear program (HiGHS). Absolute
  residuals shrug off the odd path whose loss test misfired; the price picks the sparsest story.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog, lsq_linear, nnls
from scipy.sparse import csc_matrix, eye, hstack

from fleetctl.analysis.solvers import register
from fleetctl.analysis.solvers.base import Problem, Solver

DENSE_LIMIT = 4_000_000  # matrix entries up to which a dense NNLS is cheaper than sparse lsq
MAX_CLEAN_ROWS = 20  # clean rows kept per bad row when shrinking an LP


def reduce(problem: Problem) -> tuple[np.ndarray, np.ndarray, csc_matrix]:
    """Suspect columns, the rows crossing them, and the sub-matrix rows x suspects."""
    cand = problem.candidates()
    if cand.size == 0:
        return cand, np.zeros(0, np.int64), csc_matrix((0, 0))
    sub = problem.A[:, cand].tocsr()
    rows = np.flatnonzero(np.diff(sub.indptr) > 0)
    return cand, rows, sub[rows].tocsc()


def prune(problem: Problem, cand: np.ndarray, rows: np.ndarray, sub: csc_matrix,
          x: np.ndarray, keep_ratio: float = 0.3) -> dict[int, float]:
    """Keep columns whose estimate is a fair part of the median signal of their bad rows."""
    bad = problem.bad[rows]
    y = problem.y[rows]
    out = {}
    for j in np.flatnonzero(x > 0):
        col = sub.getcol(j).toarray().ravel() > 0
        hit = col & bad
        if hit.sum() < problem.th.min_bad_paths:
            continue
        if x[j] >= keep_ratio * np.median(y[hit]):
            out[int(cand[j])] = float(x[j])
    return out


@register
class NnlsSolver(Solver):
    name = "nnls"
    description = "non-negative least squares on the suspects, then Occam pruning"

    def blame(self, problem: Problem) -> dict[int, float]:
        cand, rows, sub = reduce(problem)
        if cand.size == 0:
            return {}
        a, y = collapse(sub, problem.y[rows])
        if a.shape[0] * a.shape[1] > SQUARE_ABOVE and a.shape[0] > 2 * a.shape[1] and \
                a.shape[1] <= GRAM_LIMIT:
            a, y = square(a, y)
        if a.shape[0] * a.shape[1] <= DENSE_LIMIT:
            x, _ = nnls(np.asarray(a.toarray() if hasattr(a, "toarray") else a), y,
                        maxiter=50 * a.shape[1] + 100)
        else:
            x = lsq_linear(a, y, bounds=(0, np.inf), lsmr_tol="auto", max_iter=200).x
        return prune(problem, cand, rows, sub, x)


GRAM_LIMIT = 3_000  # suspects up to which a tall system is squared first (square)
# entries above which it is: the normal equations square the condition number, and in a small
# system near-twins (a two-leaf lab's cable directions, told apart by a few loop rows) must keep
# the tall NNLS's exact choice; a small system's NNLS is fast anyway
SQUARE_ABOVE = 1_000_000


def square(a: csc_matrix, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A tall least-squares system as a square one with the same objective up to a constant:
    with A^T A = V diag(l) V^T, R = diag(sqrt(l)) V^T and z = diag(1/sqrt(l)) V^T A^T y,
    ||R x - z||^2 = ||A x - y||^2 - ||y||^2 + ||z||^2 (directions of l ~ 0 are ones A^T y has
    none of). A leaf delaying everything left 5,000-7,600 distinct rows over ~550 suspects at
    1,280 x 8: the active-set NNLS took 0.8 s on them; on the square system it is n x n."""
    gram = (a.T @ a).toarray()
    rhs = a.T @ y
    lam, vec = np.linalg.eigh(gram)
    keep = lam > lam.max(initial=0.0) * gram.shape[0] * np.finfo(float).eps
    scale = np.sqrt(lam[keep])
    r = scale[:, None] * vec[:, keep].T
    z = (vec[:, keep].T @ rhs) / scale
    return r, z


def collapse(sub: csc_matrix, y: np.ndarray) -> tuple[csc_matrix, np.ndarray]:
    """The least-squares system with identical rows made one: a group of n rows equal over the
    suspects, with values y_i, weighs as one row scaled by sqrt(n) with value sqrt(n) * mean(y)
    (sum_i (a.x - y_i)^2 = n (a.x - mean y)^2 + a constant: the same minimiser). A switch
    delaying everything makes most paths through it bad and suspects all its links: 100,000 rows
    over ~100 columns took lsq_linear 17 s a window at 128 hosts; the paths cross the switch's
    links in at most (links)^2 ways. Rows are told apart by two random projections (equal rows
    give bit-equal sums: the same entries in the same order)."""
    csr = sub.tocsr()
    if csr.shape[0] < 2:
        return sub, y
    rng = np.random.default_rng(0x5EED)
    sig = csr @ rng.random((csr.shape[1], 2))
    _, first, group, count = np.unique(sig, axis=0, return_index=True, return_inverse=True,
                                       return_counts=True)
    if first.size == csr.shape[0]:
        return sub, y
    group = group.ravel()
    mean = np.bincount(group, weights=y, minlength=first.size) / count
    w = np.sqrt(count.astype(np.float64))
    a = csr[first].multiply(w[:, None]).tocsc()
    return a, w * mean


@register
class L1Solver(Solver):
    name = "l1"
    description = "least absolute deviations with an L1 price on x (linear program, HiGHS)"
    price = 0.05  # per unit of x, relative to one path's absolute residual

    def blame(self, problem: Problem) -> dict[int, float]:
        cand, rows, sub = reduce(problem)
        if cand.size == 0:
            return {}
        rows, sub = _bounded_rows(problem, rows, sub)
        y = problem.y[rows]
        m, n = sub.shape
        # variables: x (n), r+ (m), r- (m);  sub x - r+ + r- = y
        a_eq = hstack([sub, -eye(m), eye(m)], format="csc")
        cost = np.concatenate([np.full(n, self.price), np.ones(2 * m)])
        res = linprog(cost, A_eq=a_eq, b_eq=y, bounds=(0, None), method="highs")
        if res.status != 0:
            return {}
        return prune(problem, cand, rows, sub, res.x[:n])


def _bounded_rows(problem: Problem, rows: np.ndarray, sub: csc_matrix):
    """Keep every bad row and at most MAX_CLEAN_ROWS clean rows per bad one (evenly spaced), so a
    suspect switch with 100,000 clean paths does not turn into a 100,000-row LP."""
    bad = problem.bad[rows]
    n_clean_max = MAX_CLEAN_ROWS * max(1, int(bad.sum()))
    clean = np.flatnonzero(~bad)
    if clean.size <= n_clean_max:
        return rows, sub
    keep_clean = clean[np.linspace(0, clean.size - 1, n_clean_max).astype(np.int64)]
    keep = np.sort(np.concatenate([np.flatnonzero(bad), keep_clean]))
    return rows[keep], sub.tocsr()[keep].tocsc()
