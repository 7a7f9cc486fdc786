"""The probe engine is one: `audit --mesh` (meshrun.analyze) and lens (lens.window) run the same
window step (analysis/step.py). A new kind of network finding is written once, as a rule, and both
report it; both agree on what triangulation finds in the same records."""

from __future__ import annotations

import numpy as np
import pytest

from fleetctl.analysis.step import WindowStep, extra_rule
from fleetctl.lens.window import WindowAnalyzer
from fleetctl.meshrun.analyze import RunData, analyze
from fleetctl.model.fabric import Element
from fleetctl.model.findings import Finding
from tests.support.fabrics import leaf_spine
from tests.support.synthetic import Fault
from tests.support.synthetic_run import synthetic_run


@pytest.fixture(scope="module")
def fabric():
    topo = leaf_spine(2, 2, 2, 2)
    pairs = [(a, b) for a in topo.nics for b in topo.nics if a.split(":")[0] != b.split(":")[0]]
    return topo, pairs


def _audit(topo, syn) -> list[dict]:
    run = RunData("r", "t", topo, syn.paths, syn.flows, syn.probes, syn.epoch_ns, {"window_s": 1.0})
    return analyze(run, window_s=1.0).findings


def _lens(topo, syn) -> list[dict]:
    an = WindowAnalyzer(topo, syn.paths, syn.flows)
    t = syn.probes["t_send"]
    start, found = int(t.min()), []
    for i in range(int((int(t.max()) - start) // 10**9) + 1):
        a, b = start + i * 10**9, start + (i + 1) * 10**9
        found += an.analyze(syn.probes[(t >= a) & (t < b)], a * 1e-9, b * 1e-9, {}, set()).findings
    return found


def toy_rule(step: WindowStep, sig, window: int) -> list[Finding]:
    """A made-up finding kind: any window where some path lost half of its probes names the spine
    it crosses most, as a `loss` with the evidence `toy`."""
    rows = np.flatnonzero(sig.valid & (sig.lost * 2 >= np.maximum(sig.sent, 1)) & (sig.lost > 0))
    if rows.size == 0:
        return []
    spine = "spine1"
    return [Finding(Element("switch", spine), "loss", "minor", 0.99,
                    {"toy": True, "window": window, "probes_through": int(sig.sent[rows].sum()),
                     "lost_through": int(sig.lost[rows].sum())})]


def test_a_rule_written_once_appears_in_audit_and_in_lens(fabric):
    topo, pairs = fabric
    syn = synthetic_run(topo, pairs, [Fault("leaf1->spine2", "loss", 0.6)], sports=8, rate_hz=40,
                        duration=4.0, seed=5)
    assert not any(f["evidence"].get("toy") for f in _audit(topo, syn) + _lens(topo, syn))
    with extra_rule(toy_rule):
        audit = [f for f in _audit(topo, syn) if f["evidence"].get("toy")]
        lens = [f for f in _lens(topo, syn) if f["evidence"].get("toy")]
    assert audit and lens
    assert {f["element"]["id"] for f in audit} == {f["element"]["id"] for f in lens} == {"spine1"}


def test_audit_and_lens_name_the_same_element_from_the_same_records(fabric):
    topo, pairs = fabric
    syn = synthetic_run(topo, pairs, [Fault("leaf1->spine2", "loss", 0.05)], sports=8, rate_hz=40,
                        duration=6.0, seed=3)
    audit = {(f["element"]["id"], f["element"].get("direction")) for f in _audit(topo, syn)
             if f.get("category", "network") == "network"}
    lens = {(f["element"]["id"], f["element"].get("direction")) for f in _lens(topo, syn)}
    assert audit == {("leaf1--spine2", "leaf1->spine2")}
    assert audit <= lens


def test_group_percentiles_are_numpys():
    from fleetctl.model.fabric import group_percentiles

    rng = np.random.default_rng(1)
    keys, vals = rng.integers(0, 50, 3000), rng.normal(size=3000)
    vals[::17] = np.nan  # not finite: left out, as np.nanmedian would
    got = group_percentiles(keys, vals, (50.0, 99.0), 52)
    for g in range(50):
        v = vals[(keys == g) & np.isfinite(vals)]
        assert got[0, g] == pytest.approx(np.median(v)) and got[1, g] == pytest.approx(np.percentile(v, 99))
    assert np.isnan(got[:, 50:]).all()  # empty groups


def test_element_percentiles_without_a_sort_per_window_equal_numpys():
    from scipy.sparse import random as sparse_random

    from fleetctl.analysis.step import ElementIndex

    rng = np.random.default_rng(4)
    inc = sparse_random(400, 60, density=0.08, random_state=5, format="csr")
    delay = rng.exponential(10.0, 400)
    delay[rng.random(400) < 0.2] = np.nan  # paths without a delay this window
    got = ElementIndex(inc).percentiles(delay, (50.0, 99.0, 0.0))
    for e in range(60):
        v = delay[inc[:, [e]].nonzero()[0]]
        v = v[np.isfinite(v)]
        if v.size == 0:
            assert np.isnan(got[:, e]).all()
            continue
        assert got[0, e] == pytest.approx(np.percentile(v, 50))
        assert got[1, e] == pytest.approx(np.percentile(v, 99))
        assert got[2, e] == pytest.approx(v.min())


def test_element_stats_count_what_crosses_each_element(fabric):
    from fleetctl.analysis.step import element_stats

    topo, pairs = fabric
    syn = synthetic_run(topo, pairs, [], sports=4, rate_hz=20, duration=1.0, seed=2)
    inc = syn.paths.matrix(topo.n_elements).tocsc()
    sent = np.arange(len(syn.paths), dtype=float)
    delay = np.linspace(1.0, 2.0, len(syn.paths))
    st = element_stats(inc, sent, np.zeros_like(sent), delay)
    for e in range(0, topo.n_elements, 3):
        col = inc.getcol(e)
        rows = col.indices[col.data > 0]
        assert st["sent"][e] == pytest.approx(float(col.data @ sent[col.indices]))
        assert st["paths"][e] == rows.size
        if rows.size:
            # delays in us, sorted to the nanosecond (model.fabric._sorted_groups)
            assert st["delay"][0, e] == pytest.approx(np.median(delay[rows]), abs=1e-3)
