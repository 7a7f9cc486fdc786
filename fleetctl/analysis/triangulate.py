"""Triangulation: from per-path, per-window loss and delay to findings on fabric elements.

    findings = triangulate(topo, paths, stats, solver="nnls")

Every window of a run through the probe engine's window step (step.py: signals, the solver, the
roll-up, every finding rule), against per-path baselines from the run itself. Findings of the same
element and metric in several windows merge into one that lists the windows.
"""

from __future__ import annotations

from fleetctl.analysis.signals import Thresholds, path_baseline
from fleetctl.analysis.step import WindowStep
from fleetctl.errors import DataError
from fleetctl.model.fabric import PathTable, Topology, WindowStats
from fleetctl.model.findings import Finding, sort_key


def triangulate(topo: Topology, paths: PathTable, stats: WindowStats, solver: str = "nnls",
                th: Thresholds | None = None, merge: bool = True) -> list[dict]:
    """Findings, most severe first. With `merge`, traced flows that took the same path are
    merged into one row first (merge.py): more probes per row, better sensitivity; evidence
    then counts distinct paths."""
    if stats.sent.shape[1] != len(paths):
        raise DataError(f"window stats cover {stats.sent.shape[1]} paths, the path table has "
                        f"{len(paths)}")
    step = WindowStep(topo, paths, solver, th, merge=merge)
    stats = step.merge(stats)
    baseline = path_baseline(stats, step.hop_class, step.th.min_probes)
    merged: dict[tuple, Finding] = {}
    for w in range(stats.n_windows):
        sig = step.signals(stats.sent[w], stats.lost[w], stats.delay[w], baseline)
        for f in step.findings(sig, w):
            _merge(merged, f)
    return sorted((f.to_dict() for f in merged.values()), key=sort_key)


def _merge(merged: dict[tuple, Finding], f: Finding) -> None:
    """One finding per identity over all windows: the most confident, with every window listed."""
    prev = merged.get(f.key)
    windows = sorted(set((prev.windows or []) if prev else []) | {f.evidence["window"]})
    if prev is None or f.confidence > prev.confidence:
        merged[f.key] = f
    merged[f.key].windows = windows