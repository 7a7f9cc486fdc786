"""Triangulation: from per-path, per-window loss and delay to findings on fabric elements.

    findings = triangulate(topo, paths, stats, solver="nnls")

Per window and metric (loss, then delay): flag bad paths (signals.py), let the solver blame link
directions (solvers/), roll them up to switches, NICs and hosts (rollup.py). Findings of the same
element and metric in several windows merge into one that lists the windows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fleetctl.analysis.merge import merge_identical_paths
from fleetctl.analysis.rollup import Rollup
from fleetctl.analysis.signals import PathSignals, Thresholds, path_baseline, window_signals
from fleetctl.analysis.solvers import Problem, get_solver
from fleetctl.errors import DataError
from fleetctl.model.fabric import PathTable, Topology, WindowStats
from fleetctl.model.findings import Finding, sort_key


def triangulate(topo: Topology, paths: PathTable, stats: WindowStats, solver: str = "nnls",
                th: Thresholds | None = None, merge: bool = True) -> list[dict]:
    """Findings, most severe first. With `merge`, traced flows that took the same path are
    merged into one row first (merge.py): more probes per row, better sensitivity; evidence
    then counts distinct paths."""
    th = th or Thresholds()
    if stats.sent.shape[1] != len(paths):
        raise DataError(f"window stats cover {stats.sent.shape[1]} paths, the path table has "
                        f"{len(paths)}")
    impl = get_solver(solver)
    if merge:
        paths, stats, _ = merge_identical_paths(paths, stats)
    inc = paths.matrix(topo.n_elements).tocsc()
    is_link = topo.element_types() == 0
    link_cols = np.flatnonzero(is_link)
    links_only = inc[:, link_cols].tocsr()
    hop_class = np.rint(np.asarray(links_only.sum(axis=1)).ravel()).astype(np.int64)
    baseline = path_baseline(stats, hop_class, th.min_probes)
    rollup = Rollup(topo, inc, th)
    merged: dict[tuple, Finding] = {}
    for w in range(stats.n_windows):
        sig = window_signals(stats.sent[w], stats.lost[w], stats.delay[w], baseline, th)
        for metric in ("loss", "delay"):
            msig = _for_metric(sig, metric)
            bad = msig.lossy if metric == "loss" else msig.delayed
            rows = np.flatnonzero(msig.valid)
            if bad[rows].sum() < th.min_bad_paths:
                continue
            y = msig.y_loss if metric == "loss" else msig.y_delay
            problem = Problem(links_only[rows], link_cols, bad[rows], y[rows], th)
            blamed = {int(link_cols[c]): v for c, v in impl.blame(problem).items()}
            if not blamed:
                continue
            for f in rollup.findings(blamed, metric, msig, w):
                _merge(merged, f)
    return sorted((f.to_dict() for f in merged.values()), key=sort_key)


def _for_metric(sig: PathSignals, metric: str) -> PathSignals:
    """A lossy path's delay figure comes from the probes that survived: for a delay finding it
    is neither bad nor clean."""
    if metric == "delay":
        sig = replace(sig, valid=sig.valid & ~sig.lossy)
    return sig


def _merge(merged: dict[tuple, Finding], f: Finding) -> None:
    """One finding per identity over all windows: the most confident, with every window listed."""
    prev = merged.get(f.key)
    windows = sorted(set((prev.windows or []) if prev else []) | {f.evidence["window"]})
    if prev is None or f.confidence > prev.confidence:
        merged[f.key] = f
    merged[f.key].windows = windows