"""Merging traced flows that took the same path into one row."""

import numpy as np

from fleetctl.analysis.merge import merge_identical_paths
from fleetctl.model.fabric import PathTable, WindowStats
from tests.support.fabrics import leaf_spine, path_table


def test_identical_traced_paths_merge_and_totals_add_up():
    t = leaf_spine(2, 2, 1, 1)
    a, b = t.nics[0], t.nics[1]
    flows = [(a, b, f) for f in range(16)]  # 16 flows over the 2 spines
    paths = path_table(t, flows)
    rng = np.random.default_rng(0)
    sent = rng.integers(5, 50, size=(2, 16))
    lost = rng.integers(0, 5, size=(2, 16))
    delay = rng.uniform(10, 20, size=(2, 16))
    merged, stats, group = merge_identical_paths(paths, WindowStats(sent, lost, delay))
    assert len(merged) == 2  # one row per spine
    assert stats.sent.sum() == sent.sum() and stats.lost.sum() == lost.sum()
    for g in range(2):
        members = group == g
        assert len({tuple(paths.row(i)) for i in np.flatnonzero(members)}) == 1
        assert list(merged.row(g)) == list(paths.row(np.flatnonzero(members)[0]))
        assert stats.sent[0, g] == sent[0, members].sum()
        vals = np.sort(delay[0, members])
        # the members' median, to the nanosecond (merge.DELAY_RESOLUTION_US)
        assert abs(stats.delay[0, g] - vals[min(len(vals) - 1, int(0.5 * len(vals)))]) <= 5e-4


def test_untraced_rows_stay_apart():
    t = leaf_spine(2, 2, 1, 1)
    a, b = t.nics[0], t.nics[1]
    rows = [t.expected_row(a, b)] * 3
    paths = PathTable.from_rows(rows, [0] * 3, [1] * 3, [False] * 3)
    stats = WindowStats(np.full((1, 3), 10), np.zeros((1, 3), int), np.ones((1, 3)))
    merged, out, group = merge_identical_paths(paths, stats)
    assert merged is paths and out is stats and list(group) == [0, 1, 2]
