"""Clock offset and drift estimation on synthetic probes with known offsets and drifts."""

import numpy as np
import pytest

from fleetctl.analysis.clock import fit_pair, synchronize
from fleetctl.errors import DataError
from tests.support.synthetic import clock_probes


def errors_us(p, model, ref=0):
    """|estimated - true| offset of every host relative to `ref`, over the run, in us."""
    out = []
    for h in range(len(p.hosts)):
        for t in np.linspace(0.0, 10.0, 11):
            est = model.theta(np.array([ref]), np.array([h]), np.array([t]))[0]
            out.append(abs(est - p.true_theta(ref, h, t)) * 1e6)
    return np.array(out)


def test_realistic_software_timestamp_noise_is_well_under_5us():
    # 5 ms offsets, 50 ppm drifts, 8 us minimum delay, 20 us mean queuing, 0.3 us asymmetry,
    # 0.2 us timestamp read jitter, 0.1 % loss: what busy-polling software timestamps see
    p = clock_probes(hosts=24, peers=4, seed=1)
    m = synchronize(p.hosts, p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
    err = errors_us(p, m)
    assert np.percentile(err, 99) < 1.5
    assert np.all(np.abs(m.residual) < 2e-6)


def test_heavy_queuing_still_meets_the_goal():
    # blocking sockets: 100 us mean wake-up latency, 1 us asymmetry per direction
    p = clock_probes(hosts=16, peers=4, queuing=100e-6, asymmetry=1e-6, seed=2)
    m = synchronize(p.hosts, p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
    assert np.percentile(errors_us(p, m), 99) < 5.0


def test_drift_is_recovered():
    p = clock_probes(hosts=8, peers=3, max_drift_ppm=100, seed=3)
    m = synchronize(p.hosts, p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
    true_rel = (p.drift - p.drift[0]) * 1e6
    assert np.allclose(m.drift * 1e6, true_rel, atol=0.2)  # ppm


def test_network_fit_corrects_a_bad_pair():
    """A pair with a large path asymmetry is pulled back by the loops through other hosts."""
    p = clock_probes(hosts=8, peers=4, seed=4)
    bad = (p.src == 0) & (p.dst == 1)
    p.t2[bad] += 30e-6  # B stamps every 0->1 probe 30 us late: pair biased by +30 us
    p.t3[bad] += 30e-6
    m = synchronize(p.hosts, p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
    pair = next(i for i, f in enumerate(m.pairs) if (f.a, f.b) == (0, 1))
    assert m.residual[pair] > 10e-6  # the network disagrees with the biased pair ...
    err = abs(m.theta(np.array([0]), np.array([1]), np.array([5.0]))[0] - p.true_theta(0, 1, 5.0))
    assert err < 2e-6  # ... and the corrected value is far better than the 30 us of the pair


def test_one_way_delays_are_corrected():
    p = clock_probes(hosts=6, peers=2, queuing=1e-9, stamp_jitter=0.0, asymmetry=0.0, loss=0.0,
                     seed=5)
    m = synchronize(p.hosts, p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
    fwd, rev = m.one_way_delays(p.src, p.dst, p.t1, p.t2, p.t3, p.t4)
    assert np.median(fwd) == pytest.approx(8e-6, abs=0.5e-6)  # the 8 us minimum delay
    assert np.median(rev) == pytest.approx(8e-6, abs=0.5e-6)
    raw = p.t2 - p.t1  # without correction: milliseconds of offset
    assert np.max(np.abs(raw)) > 1e-4


def test_disconnected_hosts_get_their_own_reference():
    p = clock_probes(hosts=6, peers=1, seed=6)  # a ring: connected
    keep = ~((p.src == 2) | (p.dst == 2) | (p.src == 5) | (p.dst == 5))
    sub = {k: getattr(p, k)[keep] for k in ("src", "dst", "t1", "t2", "t3", "t4")}
    m = synchronize(p.hosts, **sub)
    assert np.isnan(m.offset[2]) and np.isnan(m.offset[5]) and m.component[2] == -1
    assert m.component[0] == m.component[1] != m.component[3] == m.component[4]
    assert m.offset[3] == 0.0  # reference of its component


def test_fit_pair_needs_probes():
    assert fit_pair([0.0], [1.0], [1.0], [2.0]) is None
    nan = np.full(10, np.nan)
    assert fit_pair(np.arange(10.0), nan, nan, nan) is None


def test_bad_input_is_a_data_error():
    with pytest.raises(DataError, match="differ in length"):
        synchronize(["a", "b"], [0, 1], [1], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0])
    with pytest.raises(DataError, match="outside the host list"):
        synchronize(["a"], [0], [3], [0.0], [0.0], [0.0], [0.0])


def test_max_margin_line_matches_a_general_lp_solver():
    """The exact slab search against scipy's HiGHS on the same LP (the solver the fit used to call
    per pair): the same margin, and a line inside the slab."""
    from scipy.optimize import linprog

    from fleetctl.analysis.clock import MAX_DRIFT, max_margin_line

    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(2, 33))
        true_a, true_b = rng.normal(0, 1e-3), rng.normal(0, 2e-5)
        ut, lt = rng.uniform(-5, 5, n), rng.uniform(-5, 5, n)  # any order (hulls sort)
        if trial % 4 == 1:
            ut, lt = np.round(ut), np.round(lt)  # equal times: vertical hull edges
        uv = true_a + true_b * ut + rng.exponential(5e-6, n) + 2e-6
        lv = true_a + true_b * lt - rng.exponential(5e-6, n) - 2e-6
        if trial % 10 == 0:
            lv = lv + 1e-5  # overlapping bounds: a negative margin
        if trial % 7 == 3:
            uv, lv = true_a + true_b * ut + 3e-6, true_a + true_b * lt - 3e-6  # collinear
        a, b, m = max_margin_line(ut, uv, lt, lv)
        scale = 1e-5
        res = linprog([0, 0, -1], A_ub=np.vstack([np.column_stack([np.ones(n), ut, np.ones(n)]),
                                                 np.column_stack([-np.ones(n), -lt, np.ones(n)])]),
                      b_ub=np.concatenate([uv, -lv]) / scale,
                      bounds=[(None, None), (-MAX_DRIFT / scale, MAX_DRIFT / scale), (None, None)],
                      method="highs")
        assert res.status == 0
        assert abs(m - res.x[2] * scale) < 1e-9, (trial, m, res.x[2] * scale)
        assert np.all(a + b * ut + m <= uv + 1e-9) and np.all(a + b * lt - m >= lv - 1e-9)
        assert abs(b) <= MAX_DRIFT


def test_a_pair_whose_bounds_leave_the_slope_free_says_nothing_of_drift():
    """Three windows of one tightest bound each way per pair (what a fleet budget gives a first
    fit): the max-margin slope of some pairs is free and sat at the +-1,000 ppm bound, and a host
    seen only through such pairs got the least-squares minimum-norm drift: 1,046 ppm for a -28
    ppm clock. Such a pair now gives its offset at b = 0 and no drift; the host's drift leans to
    the reference's (the drift prior) instead of absorbing offsets."""
    from fleetctl.analysis.clock import MAX_DRIFT

    rng = np.random.default_rng(1)
    n = 64
    off, dr = rng.uniform(-2e-3, 2e-3, n), rng.uniform(-30e-6, 30e-6, n)
    rows = []
    for a in range(n):
        for b in rng.choice(n, 12, replace=False):
            if a == b:
                continue
            for w in range(3):
                t1, t4 = w + rng.uniform(0, 1), w + rng.uniform(0, 1)
                d1, d2 = 10e-6 + rng.exponential(1e-6, 2)
                rows.append((a, b, t1, t1 + d1 + off[b] - off[a] + (dr[b] - dr[a]) * t1,
                             t4 - d2 + off[b] - off[a] + (dr[b] - dr[a]) * t4, t4))
    src, dst, t1, t2, t3, t4 = (np.array(c) for c in zip(*rows))
    m = synchronize([f"h{i}" for i in range(n)], src, dst, t1, t2, t3, t4)
    assert not any(abs(f.drift) >= MAX_DRIFT * 0.999 for f in m.pairs)
    assert any(not f.drift_known for f in m.pairs)  # the case is there
    for comp in set(m.component.tolist()) - {-1}:
        members = np.flatnonzero(m.component == comp)
        ref = members[0]
        err = np.abs((m.drift[members] - m.drift[ref]) - (dr[members] - dr[ref])) * 1e6
        assert err.max() < 80.0, err.max()  # was 1,046 ppm; the clocks are within 30 ppm
