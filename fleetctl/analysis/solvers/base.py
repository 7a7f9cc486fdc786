"""The solver interface: from bad paths to blamed link directions.

A solver sees one metric of one window as a Problem (paths x link-direction columns) and returns
the link directions it blames with an estimated magnitude in the units of `y`. Rolling blamed links
up to switches, NICs and hosts, and scoring confidence, is shared and lives in rollup.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from fleetctl.analysis.signals import Thresholds


@dataclass
class Problem:
    A: csr_matrix  # valid paths x link columns, entries = probability the path crosses the link
    columns: np.ndarray  # element index of each column
    bad: np.ndarray  # bool per row
    y: np.ndarray  # additive magnitude per row, 0 on good rows
    th: Thresholds

    def column_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per column: weighted number of bad paths and of all paths crossing it."""
        n_all = np.asarray(self.A.sum(axis=0)).ravel()
        n_bad = np.asarray(self.A[self.bad].sum(axis=0)).ravel() if self.bad.any() \
            else np.zeros(self.A.shape[1])
        return n_bad, n_all

    def candidates(self) -> np.ndarray:
        """Columns worth solving for: crossed by enough bad paths, and bad on a fair share of all
        the paths that cross them (a link carried mostly by clean paths is exonerated)."""
        n_bad, n_all = self.column_counts()
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(n_all > 0, n_bad / n_all, 0.0)
        return np.flatnonzero((n_bad > 0) & (share >= self.th.candidate_share))


class Solver(ABC):
    """Blames link-direction columns. Subclasses set `name` and register with @register."""

    name: str = ""
    description: str = ""

    @abstractmethod
    def blame(self, problem: Problem) -> dict[int, float]:
        """Column index -> estimated magnitude, for each blamed column."""
