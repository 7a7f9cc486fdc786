"""ElementRows: a window's per-element figures as arrays, rows built when read."""

import heapq
import json
from collections import namedtuple

import numpy as np

from fleetctl.lens.elementrows import ElementRows

El = namedtuple("El", "type id direction")


def _rows(n: int = 400, seed: int = 3, since=None) -> ElementRows:
    rng = np.random.default_rng(seed)
    elements = []
    for i in range(n // 2):  # links with two directions (one id each pair), switches, NICs
        elements.append(El("link", f"l{i % 37:03d}", f"a{i}->b{i}"))
        elements.append(El("link", f"l{i % 37:03d}", f"b{i}->a{i}") if i % 3 else
                        El("nic", f"node{i}:eth0", ""))
    ids = np.array([e.id for e in elements])
    rank = np.unique(ids, return_inverse=True)[1].ravel()
    cols = np.sort(rng.choice(len(elements), size=n // 2, replace=False))
    loss = np.round(np.where(rng.random(len(cols)) < 0.3, rng.random(len(cols)) * 5, 0.0), 3)
    p50 = np.where(rng.random(len(cols)) < 0.2, np.nan, np.round(rng.random(len(cols)) * 50, 1))
    probes = rng.integers(1, 1000, len(cols))
    return ElementRows(elements, cols, loss, p50, p50 * 2, probes, probes // 10, since, rank)


def test_rows_are_the_documented_dicts():
    rows = _rows(since=12.0)
    first = rows[0]
    assert set(first) >= {"type", "id", "loss_pct", "delay_p50_us", "delay_p99_us", "probes",
                          "lost", "delay_window_end"}
    assert all(type(r["probes"]) is int and type(r["loss_pct"]) is float for r in rows)
    assert any(r["delay_p50_us"] is None for r in rows)  # NaN reads as None, JSON-safe
    json.dumps(list(rows), allow_nan=False)
    assert "delay_window_end" not in _rows()[0]
    assert len(rows) == len(list(rows)) == 200 and rows[-1] == list(rows)[-1]


def test_worst_is_the_lossiest_ties_by_id_as_nsmallest():
    for seed in range(5):
        rows = _rows(seed=seed)
        want = heapq.nsmallest(50, list(rows), key=lambda r: (-(r["loss_pct"] or 0), r["id"]))
        assert rows.worst(50) == want
    assert _rows().worst(0) == [] and len(_rows().worst(10_000)) == 200


def test_an_empty_window_has_no_rows():
    rows = ElementRows([], np.zeros(0, np.int64), *(np.zeros(0),) * 3, np.zeros(0, np.int64),
                       np.zeros(0, np.int64), None, np.zeros(0, np.int64))
    assert len(rows) == 0 and list(rows) == [] and rows.worst(5) == [] and not rows


def test_concat_records_is_np_concatenate():
    from fleetctl.model.summary import SUMMARY_DTYPE, concat_records

    rng = np.random.default_rng(1)
    parts = []
    for n in (0, 3, 1, 7):
        a = np.zeros(n, SUMMARY_DTYPE)
        for name in SUMMARY_DTYPE.names:
            a[name] = rng.integers(0, 1000, n)
        parts.append(a)
    parts.append(parts[3][::2])  # not contiguous
    got = concat_records(parts)
    assert got.dtype == SUMMARY_DTYPE and np.array_equal(got, np.concatenate(parts))
    mixed = [np.zeros(2, [("a", "<i4")]), np.zeros(1, [("a", "<i8")])]
    assert np.array_equal(concat_records(mixed), np.concatenate(mixed))
    assert np.array_equal(concat_records([np.arange(3), np.arange(2)]), [0, 1, 2, 0, 1])
