"""Raw probe records -> per-window path figures -> findings: the offline pipeline end to end."""

import numpy as np
import pytest

from fleetctl.analysis.triangulate import triangulate
from fleetctl.analysis.windows import add_pair_figures, build_windows, host_clock
from fleetctl.errors import DataError
from fleetctl.model.fabric import WindowStats, group_quantiles
from tests.support.fabrics import find, leaf_spine
from tests.support.synthetic import Fault
from tests.support.synthetic_run import synthetic_run


@pytest.fixture(scope="module")
def topo():
    return leaf_spine(4, 2, 2, 2)


def all_pairs(t):
    return [(a, b) for a in t.nics for b in t.nics if a.split(":")[0] != b.split(":")[0]]


def pipeline(t, faults, seed=0, clock=True):
    run = synthetic_run(t, all_pairs(t), faults, sports=8, duration=6.0, seed=seed)
    model = host_clock(run.probes, run.nic_host, run.hosts, run.epoch_ns) if clock else None
    w = build_windows(run.probes, run.flows, len(run.paths), len(t.nics), run.nic_host, 3.0,
                      run.epoch_ns, model)
    add_pair_figures(w, run.probes, len(t.nics), run.nic_host, run.epoch_ns, model)
    return run, model, w


def test_group_quantiles_nearest_rank():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5, 1000)
    vals = rng.normal(size=1000)
    vals[::17] = np.nan
    q = group_quantiles(keys, vals, [0.5, 0.99], 6)
    for k in range(5):
        v = np.sort(vals[(keys == k) & np.isfinite(vals)])
        assert q[0, k] == v[min(len(v) - 1, int(0.5 * len(v)))]
        assert q[1, k] == v[min(len(v) - 1, int(0.99 * len(v)))]
    assert np.isnan(q[:, 5]).all()


def test_loss_is_charged_to_the_direction_it_happened(topo):
    run, _, w = pipeline(topo, [Fault("spine1->leaf2", "down")], seed=1)
    lost_per_path = w.path_lost.sum(axis=0)
    inc = run.paths.matrix(topo.n_elements).tocsc()
    through = inc.getcol(find(topo, "spine1->leaf2")).toarray().ravel() > 0
    assert lost_per_path[through].min() > 0  # every path over the dead direction lost probes
    assert lost_per_path[~through].max() <= 2  # the rest: background only (none injected)
    # a probe whose reverse path crosses the dead direction was still delivered forward
    assert (run.probes["lost"] == 2).any() and (run.probes["lost"] == 1).any()


def test_one_way_delays_with_and_without_clock_sync(topo):
    _, model, w = pipeline(topo, [], seed=2)
    assert w.one_way
    # synthetic paths: 5 us stack + 0.5-2 us per element + exponential jitter (5 us mean)
    assert 8 < np.nanmedian(w.path_p50_us) < 25
    _, _, raw = pipeline(topo, [], seed=2, clock=False)
    assert not raw.one_way and 8 < np.nanmedian(raw.path_p50_us) < 25
    # without clock sync a NIC x NIC one-way figure is meaningless; with it, both agree
    assert abs(np.nanmedian(w.pair_p50_us) - np.nanmedian(raw.pair_p50_us)) < 3


def test_pair_figures_are_the_probed_pairs_and_match_the_probes(topo):
    run, _, w = pipeline(topo, [Fault("leaf1->spine2", "loss", 0.05)], seed=4, clock=False)
    p = run.probes
    assert set(zip(w.pair_src.tolist(), w.pair_dst.tolist())) == \
        set(zip(p["src_nic"].tolist(), p["dst_nic"].tolist()))
    assert int(w.pair_sent.sum()) == len(p)
    k = 3
    mine = (p["src_nic"] == w.pair_src[k]) & (p["dst_nic"] == w.pair_dst[k])
    lost = (p["lost"][mine] != 0).sum()
    sent = w.pair_sent[:, k].sum()
    assert sent == mine.sum() and np.isclose(np.nansum(w.pair_loss[:, k] * w.pair_sent[:, k]), lost)
    dense = w.matrix("loss", len(topo.nics))
    assert dense.shape == (w.pair_sent.shape[0], len(topo.nics), len(topo.nics))
    assert np.isnan(dense[:, 0, 0]).all()  # a NIC never probes itself
    assert np.allclose(dense[:, w.pair_src, w.pair_dst], w.pair_loss, equal_nan=True)


def test_a_window_costs_what_its_probes_and_paths_do_not_nics_squared():
    """The issue's figure: one window at 8,192 NICs took 2.9 GB for its N x N matrices. Now the
    window's arrays hold probes, paths and probed pairs only: 4x the NICs (and pairs, paths,
    probes) is about 4x the memory, where N x N would be 16x."""
    import tracemalloc

    from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE

    def peak(n_nics):
        rng = np.random.default_rng(0)
        n_flows = n_nics * 4  # 4 peers a NIC (a budgeted plan's order)
        flows = np.zeros(n_flows, dtype=FLOW_DTYPE)
        flows["flow"] = np.arange(n_flows) * 7 + 1
        flows["fwd_path"] = np.arange(n_flows)
        flows["rev_path"] = np.arange(n_flows) + n_flows
        probes = np.zeros(n_flows * 20, dtype=PROBE_DTYPE)
        fi = np.repeat(np.arange(n_flows), 20)
        probes["flow"] = flows["flow"][fi]
        probes["src_nic"] = fi // 4
        probes["dst_nic"] = (fi // 4 + 1 + fi % 4) % n_nics
        probes["t_send"] = 10**9 + rng.integers(0, 10**9 - 1, len(probes))
        probes["t_remote_rx"] = probes["t_send"] + 5000
        probes["t_remote_tx"] = probes["t_remote_rx"] + 1000
        probes["t_recv"] = probes["t_remote_tx"] + 5000
        tracemalloc.start()
        w = build_windows(probes, flows, 2 * n_flows, n_nics, np.arange(n_nics) // 8, 1.0)
        add_pair_figures(w, probes, n_nics, np.arange(n_nics) // 8)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak

    small, large = peak(2048), peak(8192)
    assert large < 6 * small, (small, large)  # N x N: 16x (and 800 MB at 8,192 NICs)
    assert large < 200e6


@pytest.mark.parametrize("solver", ["nnls", "l1", "vote", "netbouncer", "flock"])
@pytest.mark.parametrize("fault,expected", [
    (Fault("leaf3->spine2", "loss", 0.05), ("link", "leaf3->spine2", "loss")),
    (Fault("spine2->leaf3", "delay", 150.0), ("link", "spine2->leaf3", "delay")),
    (Fault("node6:eth1", "down"), ("nic", "node6:eth1", "down")),
])
def test_end_to_end_with_skewed_clocks(topo, solver, fault, expected):
    run, _, w = pipeline(topo, [fault], seed=4)
    found = triangulate(topo, run.paths, WindowStats(w.path_sent, w.path_lost, w.path_p50_us),
                        solver)
    got = [(f["element"]["type"], f["element"].get("direction") or f["element"]["id"],
            f["metric"]) for f in found]
    assert got == [expected]


def test_clean_run_end_to_end(topo):
    run, _, w = pipeline(topo, [], seed=5)
    for solver in ("nnls", "vote"):
        stats = WindowStats(w.path_sent, w.path_lost, w.path_p99_us)
        assert triangulate(topo, run.paths, stats, solver) == []


def test_bad_records(topo):
    run, _, _ = pipeline(topo, [], seed=6)
    with pytest.raises(DataError, match="no probe records"):
        build_windows(run.probes[:0], run.flows, 1, 1, run.nic_host, 1.0)
    with pytest.raises(DataError, match="window length"):
        build_windows(run.probes, run.flows, 1, 1, run.nic_host, 0.0)
    with pytest.raises(DataError, match="flow table lacks"):
        build_windows(run.probes, run.flows[:1], len(run.paths), len(topo.nics), run.nic_host,
                      1.0, run.epoch_ns)


@pytest.mark.parametrize("statistic", ["p50", "p99"])
def test_heavy_tailed_jitter_gives_no_finding(topo, statistic):
    """Blocking sockets: 80 us mean exponential wake-up jitter. A window's p99 over 100 probes
    then makes scattered paths look slow; that must not become a finding."""
    for seed in range(2):
        run = synthetic_run(topo, all_pairs(topo), [], sports=8, rate_hz=20, duration=10,
                            jitter_us=80.0, seed=seed)
        clock = host_clock(run.probes, run.nic_host, run.hosts, run.epoch_ns)
        w = build_windows(run.probes, run.flows, len(run.paths), len(topo.nics), run.nic_host,
                          5.0, run.epoch_ns, clock)
        delay = w.path_p50_us if statistic == "p50" else w.path_p99_us
        for solver in ("nnls", "vote", "flock"):
            found = triangulate(topo, run.paths, WindowStats(w.path_sent, w.path_lost, delay),
                                solver)
            assert found == [], (solver, seed)


def test_loss_of_unknown_direction_counts_against_both_paths(topo):
    run = synthetic_run(topo, all_pairs(topo)[:4], [], sports=2, duration=2.0, seed=8)
    probes = run.probes.copy()
    probes["lost"][:5] = 3  # e.g. an agent that never heard back and cannot ask the responder
    probes["t_recv"][:5] = 0
    w = build_windows(probes, run.flows, len(run.paths), len(topo.nics), run.nic_host, 10.0,
                      run.epoch_ns)
    flow = run.flows[run.flows["flow"] == probes["flow"][0]][0]
    assert w.path_lost[0, flow["fwd_path"]] == 5 and w.path_lost[0, flow["rev_path"]] == 5
    # every probe counts once on its forward path and once on its reverse path
    assert w.path_sent[0, flow["fwd_path"]] == w.path_sent[0, flow["rev_path"]]


def test_column_nanquantile_is_numpys():
    import warnings

    from fleetctl.analysis.signals import column_nanquantile

    rng = np.random.default_rng(1)
    for w in (1, 2, 3, 7, 20):
        x = rng.normal(size=(w, 300))
        x[rng.random(x.shape) < 0.3] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            for q in (0.0, 0.1, 0.5, 0.99):
                assert np.allclose(column_nanquantile(x, q), np.nanquantile(x, q, axis=0),
                                   equal_nan=True)


def test_group_quantiles_packed_sort_agrees_to_its_resolution():
    from fleetctl.model.fabric import PACK_KEY_LIMIT, group_quantiles

    rng = np.random.default_rng(3)
    keys = rng.integers(0, 500, 20_000)
    vals = rng.exponential(30.0, 20_000) - 5.0  # us, some negative (one-way, clock error)
    vals[::13] = np.nan
    for linear in (False, True):
        exact = group_quantiles(keys, vals, [0.5, 0.99], 500, linear=linear)
        fast = group_quantiles(keys, vals, [0.5, 0.99], 500, linear=linear, resolution=1e-3)
        assert np.allclose(fast, exact, atol=1e-3, equal_nan=True)
    # keys or values that do not fit the packed key: the exact two-key sort
    from fleetctl.model.fabric import _packed

    finite = np.nan_to_num(vals)
    assert _packed(keys + PACK_KEY_LIMIT, finite, 1e-3) is None
    assert _packed(keys, finite * 1e9, 1e-3) is None and _packed(keys, finite, 1e-3) is not None
    huge = vals * 1e9
    assert np.array_equal(group_quantiles(keys, huge, [0.5], 500, resolution=1e-3),
                          group_quantiles(keys, huge, [0.5], 500), equal_nan=True)


def test_a_probe_naming_a_nic_outside_the_topology_is_a_data_error(topo):
    from fleetctl.errors import DataError

    run, _, _ = pipeline(topo, [], seed=6, clock=False)
    bad = run.probes.copy()
    bad["dst_nic"][0] = len(topo.nics)
    with pytest.raises(DataError, match="outside the"):
        build_windows(bad, run.flows, len(run.paths), len(topo.nics), run.nic_host, 3.0,
                      run.epoch_ns)


def test_fixed_groups_quantiles_are_group_quantiles():
    """The per-plan layout (members gathered by group size) gives group_quantiles' figures,
    nearest rank and linear, NaN values left out, members out of range in no group."""
    from fleetctl.model.fabric import FixedGroups

    rng = np.random.default_rng(9)
    for _ in range(50):
        n, slots = int(rng.integers(1, 40)), int(rng.integers(0, 300))
        keys = rng.integers(-2, n + 2, slots)
        vals = rng.normal(size=slots)
        vals[rng.random(slots) < 0.2] = np.nan
        layout = FixedGroups(keys, n)
        inside = (keys >= 0) & (keys < n)
        for linear in (False, True):
            qs = [0.0, 0.5, 0.99, 1.0]
            assert np.array_equal(
                layout.quantiles(vals, qs, linear),
                group_quantiles(keys[inside], vals[inside], qs, n, linear=linear), equal_nan=True)
    with pytest.raises(ValueError):
        FixedGroups(np.zeros(3), 1).quantiles(np.zeros(4), [0.5])


def test_merged_rows_medians_from_the_plans_layout_equal_the_sorted_ones():
    from fleetctl.analysis.merge import merge_stats
    from fleetctl.model.fabric import FixedGroups

    rng = np.random.default_rng(4)
    group = rng.integers(0, 30, 200)
    delay = rng.normal(100, 10, (2, 200))
    delay[:, ::7] = np.nan
    stats = WindowStats(rng.integers(2, 9, (2, 200)), rng.integers(0, 2, (2, 200)), delay,
                        rng.normal(100, 5, 200))
    ref = merge_stats(stats, group, 30)
    got = merge_stats(stats, group, 30, FixedGroups(group, 30))
    assert (got.sent == ref.sent).all() and (got.lost == ref.lost).all()
    assert np.allclose(got.delay, ref.delay, atol=1e-3, equal_nan=True)
    assert np.allclose(got.baseline, ref.baseline, atol=1e-3, equal_nan=True)
