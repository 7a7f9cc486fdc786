"""Agent-side summaries (lens's default agent output): the agent's standard-library summaries
equal the coordinator's own computation from the same records; two real agents in summary mode
over loopback (one with an emulated clock) are decoded and ingested into windows whose counts
add up; hostile summaries are refused with the node named."""

from __future__ import annotations

import base64
import time
import zlib
from array import array

import numpy as np
import pytest

from fleetctl.analysis.summaries import from_probes, merge
from fleetctl.errors import DataError
from fleetctl.lens.ingest import Ingest
from fleetctl.mesh import agent
from fleetctl.mesh.collect import decode_summary, parse_stream
from fleetctl.mesh.records import ANSWERED, UNANSWERED
from fleetctl.mesh.summary import ROW, SUMMARY_FIELDS, received_counts, summarize
from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE
from test_mesh_agent import config, free_port, start
from test_mesh_agent_stream import read_stream

W = 1_000_000_000


def _records(n=4000, seed=0):
    """Sender records of 3 flows over 3 windows: delays with jitter, 5 % unanswered."""
    rng = np.random.default_rng(seed)
    t1 = np.sort(rng.integers(5 * W, 8 * W, n))
    flow = rng.integers(0, 3, n).astype(np.uint32)
    t2 = t1 + 700_000 + rng.integers(0, 9_000, n)  # + a 0.7 ms clock offset
    t3 = t2 + rng.integers(5_000, 30_000, n)
    t4 = t3 - 700_000 + rng.integers(0, 9_000, n)
    state = np.where(rng.random(n) < 0.05, UNANSWERED, ANSWERED).astype(np.uint8)
    for t in (t2, t3, t4):
        t[state != ANSWERED] = 0
    return {"flow": flow, "seq": np.arange(n, dtype=np.uint32), "t1": t1, "t2": t2, "t3": t3,
            "t4": t4, "state": state}


def _as_arrays(rec):
    codes = {"flow": "I", "seq": "I", "t1": "q", "t2": "q", "t3": "q", "t4": "q", "state": "B"}
    return {k: array(codes[k], v.tolist()) for k, v in rec.items()}


def test_agent_summaries_equal_the_coordinators_own():
    rec = _records()
    rows, bins = summarize(_as_arrays(rec), W, 10, loops={})
    probes = np.zeros(len(rec["flow"]), PROBE_DTYPE)
    probes["flow"], probes["src_nic"], probes["dst_nic"] = rec["flow"], 0, 1
    probes["t_send"], probes["t_remote_rx"] = rec["t1"], rec["t2"]
    probes["t_remote_tx"], probes["t_recv"] = rec["t3"], rec["t4"]
    probes["lost"] = np.where(rec["state"] == ANSWERED, 0, 1)
    ref = from_probes(probes, W, 10)
    order = np.lexsort((np.array(rows["flow"]), np.array(rows["window"])))
    assert len(order) == ref.rows.size == 9  # 3 flows x 3 windows
    for name in ("window", "flow", "sent", "answered", "t1", "t4", "bound_t1", "bound_fwd",
                 "bound_t4", "bound_rev"):
        assert (np.array(rows[name])[order] == ref.rows[name]).all(), name
    for name in ("fwd", "rev", "t1"):  # medians: the agent's integer midpoint, numpy's float
        assert np.abs(np.array(rows[name])[order] - ref.rows[name]).max() <= 1, name
    flat = np.array(bins).reshape(-1, 21)
    assert flat.shape[0] == ref.bin_rows.size == 9  # every row had an unanswered probe
    inv = np.argsort(order)
    got = flat[np.argsort(inv[flat[:, 0]])]
    assert (got[:, 1:11] == ref.bin_sent).all() and (got[:, 11:] == ref.bin_lost).all()
    assert ref.bin_sent.sum() == len(rec["flow"]) and ref.bin_lost.sum() == \
        (rec["state"] != ANSWERED).sum()


def test_received_counts_by_the_senders_window():
    got = received_counts(array("I", [1, 1, 2, 1]), array("q", [W + 5, 2 * W - 1, W, 2 * W]), W)
    assert sorted(zip(got["window"], got["flow"], got["count"])) == [(1, 1, 2), (1, 2, 1),
                                                                      (2, 1, 1)]


def test_merge_adds_the_parts_of_a_window():
    rec = _records()
    probes = np.zeros(len(rec["flow"]), PROBE_DTYPE)
    probes["flow"], probes["dst_nic"] = rec["flow"], 1
    probes["t_send"], probes["t_remote_rx"] = rec["t1"], rec["t2"]
    probes["t_remote_tx"], probes["t_recv"] = rec["t3"], rec["t4"]
    probes["lost"] = np.where(rec["state"] == ANSWERED, 0, 1)
    whole = from_probes(probes, W)
    half = len(probes) // 2
    parts = merge([from_probes(probes[:half], W), from_probes(probes[half:], W)], W, 10)
    assert parts.rows.size == whole.rows.size
    for name in ("sent", "answered", "bound_fwd", "bound_rev"):
        assert (parts.rows[name] == whole.rows[name]).all(), name
    assert np.abs(parts.rows["fwd"] - whole.rows["fwd"]).max() < 3_000  # weighted, not exact
    assert parts.bin_sent.sum() == whole.bin_sent.sum()
    assert parts.bin_lost.sum() == whole.bin_lost.sum()


def test_two_agents_in_summary_mode_feed_the_coordinators_windows():
    port = free_port()
    # a generous echo timeout: every probe's echo is counted below, and on a loaded 2-core
    # machine (the unit tests in two processes) one took over 0.5 s
    cfg = config(port, rate=100, duration=3.0, linger=2.0, start_in=0.3,
                 clock_a={"source": "offset", "offset_ms": 3.0, "drift_ppm": 10.0,
                                       "t0": time.time()})
    cfg.update(output="summary", health_window_s=0.5, echo_timeout_s=2.0,
               summary_window_s=1.0, summary_bins=10)
    procs = [start(cfg, "a"), start(cfg, "b")]
    docs = {n: parse_stream(read_stream(p), n) for n, p in zip("ab", procs)}
    flows = np.array([(f, 0 if f < 4 else 1, 1 if f < 4 else 0, port + 1 + f % 4, f, f)
                      for f in range(8)], dtype=FLOW_DTYPE)
    ing, early = Ingest(flows), Ingest(flows)
    for node, doc in docs.items():
        assert all("summary" in b and "records" not in b for b in doc["batches"])
        for b in doc["batches"]:
            ing.add(node, b, time.time())
            early.add(node, b, time.time() - 3600)  # an hour before: windows far ahead
    assert early.summaries == {} and early.received == {}
    assert early.ahead == docs["a"]["counters"]["sent"] + docs["b"]["counters"]["sent"]
    windows = sorted(ing.summaries)
    total = {"sent": 0, "answered": 0, "received": 0}
    for w in windows:
        s = ing.close_summary(w * W, (w + 1) * W)
        assert s.rows.size and (s.rows["window"] == w).all()
        for k in total:
            total[k] += int(s.rows[k].sum())
        ok = s.rows["answered"] > 0
        # forward raw times hold node b's clock minus node a's (a runs 3 ms ahead): about
        # -3 ms on a's flows (0-3), +3 ms on b's, within the loopback's delay
        fwd = s.rows["fwd"][ok] * 1e-6
        a_side = s.rows["flow"][ok] < 4
        assert (np.abs(fwd[a_side] + 3.0) < 1.0).all() and (np.abs(fwd[~a_side] - 3.0) < 1.0).all()
    sent = docs["a"]["counters"]["sent"] + docs["b"]["counters"]["sent"]
    assert total["sent"] == sent and total["answered"] == total["received"] == sent
    assert ing.bad_batches == 0


def _summary_doc(**over):
    row = base64.b64encode(zlib.compress(ROW.pack(*([0] * len(SUMMARY_FIELDS))))).decode()
    doc = {"window_ns": W, "bins": 10, "rows": {"n": 1, "data": row},
           "row_bins": {"n": 0, "data": ""}, "received": {"n": 0}}
    doc.update(over)
    return doc


@pytest.mark.parametrize("over, what", [
    ({"window_ns": 5}, "out of range"),
    ({"bins": 10_000}, "out of range"),
    ({"rows": {"n": 10**9}}, "out of range"),
    ({"rows": {"n": 2, "data": "AAAA"}}, "unreadable"),
    ({"row_bins": {"n": 21, "data": base64.b64encode(zlib.compress(bytes(10**6))).decode()}},
     "holds"),
    ({"received": "x"}, "malformed"),
])
def test_hostile_summaries_are_refused(over, what):
    assert decode_summary(_summary_doc(), "n1")[0].rows.size == 1
    with pytest.raises(DataError, match=what) as exc:
        decode_summary(_summary_doc(**over), "n1")
    assert "n1" in str(exc.value)


def test_agent_refuses_an_unknown_output_mode():
    with pytest.raises(ValueError, match="output mode"):
        agent.Agent(dict(config(free_port()), output="carrier-pigeon"), "a")


def test_the_ring_holds_a_whole_summary_window_and_its_echo_timeout():
    """Records stay until their whole summary window is final: a ring sized for the record
    stream alone overflowed on the lab (records forced out, counted, the agents overloaded)."""
    cfg = dict(config(free_port(), rate=1000), health_window_s=0.25, echo_timeout_s=0.2)
    stream = agent.Agent(dict(cfg, output="stream"), "a")
    summary = agent.Agent(dict(cfg, output="summary", summary_window_s=1.0), "a")
    sends_per_s = 1000 * len(summary.pairs)
    assert summary.rec.size >= 1.5 * sends_per_s * (1.0 + 0.2 + 2 * 0.25)
    assert summary.rec.size > stream.rec.size


def test_a_summarys_flow_rows_are_found_once_and_follow_its_selections():
    from fleetctl.analysis.summaries import flow_rows, index_flows
    from fleetctl.analysis.windows import FlowIndex
    from fleetctl.model.summary import WindowSummary

    flows = np.zeros(4, FLOW_DTYPE)
    flows["flow"] = [9, 3, 5, 7]
    s = WindowSummary.empty(1_000_000_000)
    s.rows = np.zeros(3, s.rows.dtype)
    s.rows["flow"] = [5, 3, 9]
    assert flow_rows(s, flows).tolist() == [2, 1, 0]  # looked up
    index_flows(s, FlowIndex(flows["flow"]))
    flows["flow"] = [0, 1, 2, 3]  # the carried index is used, not a new lookup
    assert flow_rows(s, flows).tolist() == [2, 1, 0]
    assert flow_rows(s.select(np.array([True, False, True])), flows).tolist() == [2, 0]
    s.rows["flow"][0] = 4
    with pytest.raises(DataError, match="flow 4"):
        index_flows(s, FlowIndex(np.array([9, 3, 5, 7])))


def test_hostile_health_rows_are_dropped_and_kept_rows_are_bounded():
    """An agent's health rows become arrays as its batch arrives: rows of the wrong width,
    non-numbers and non-lists are dropped there (never reaching the integrity step), and a host
    keeps at most MAX_HEALTH_ROWS rows between windows."""
    from fleetctl.analysis.integrity import overload_marks
    from fleetctl.lens.ingest import MAX_HEALTH_ROWS

    fields = list(agent.HEALTH_FIELDS)
    it, idur = fields.index("t_start_ns"), fields.index("duration_s")
    t0 = 1_800_000_000 * 10**9

    def row(k):
        r = [0] * len(fields)
        r[it], r[idur] = t0 + k * 250_000_000, 0.25
        return r

    ing = Ingest(np.zeros(4, dtype=FLOW_DTYPE))
    ing.set_fields(fields)
    for bad in ([[1, 2]], [["x"] * len(fields)], ["row"], [[None] * len(fields)], "rows", [[]]):
        ing._note_health("node1", {"health": bad})
    assert "node1" not in ing.health
    for k in range(200):  # 50 s of rows, never closed
        ing._note_health("node1", {"health": [row(k)]})
    ing._note_health("node2", {"health": [row(0), [1, 2], row(1)]})  # the good rows stay
    _, health = ing.close(t0 + 49 * 10**9, t0 + 50 * 10**9)
    assert sum(len(c) for c in ing.health["node1"]) <= MAX_HEALTH_ROWS
    assert len(health["node1"]["windows"]) <= MAX_HEALTH_ROWS and "node2" not in health
    marks = overload_marks(health, ["node1", "node2"])
    assert not marks["node1"].overloaded


def test_a_plans_dense_flow_ids_are_found_without_a_search_and_unknown_ones_refused():
    from fleetctl.analysis.windows import FlowIndex

    index = FlowIndex(np.arange(100, 110, dtype=np.int32))  # a plan's ids: its rows, from 100
    assert index.first == 100
    rows, known = index.rows_known(np.array([105, 100, 109, 99, 110, -1]))
    assert rows.tolist()[:3] == [5, 0, 9] and known.tolist() == [True] * 3 + [False] * 3
    with pytest.raises(DataError, match="flow 110"):
        index.rows(np.array([101, 110]))
    sparse_ids = FlowIndex(np.array([9, 3, 5, 7]))
    assert sparse_ids.first is None and sparse_ids.rows(np.array([7, 9])).tolist() == [3, 0]


def test_sums_by_key_and_distinct_keys_agree_over_a_table_and_a_sort():
    from fleetctl.analysis import summaries as S

    rng = np.random.default_rng(5)
    for spread in (50, 1 << 40):  # a window's flow ids (a table), and keys far apart (a sort)
        keys = rng.integers(0, 50, 400) * (spread // 50)
        weights = rng.random(400)
        wanted = np.r_[np.unique(keys)[:20], -7, (spread // 50) * 51, 3]
        got = S.sum_by_key(keys, weights, wanted)
        assert np.allclose(got, [weights[keys == k].sum() for k in wanted])
        assert S._all_distinct(np.unique(keys)) and not S._all_distinct(keys)
    assert S.sum_by_key(np.zeros(0, np.int64), np.zeros(0), np.array([1])).tolist() == [0.0]


def test_selecting_every_row_is_the_summary_itself():
    from fleetctl.model.summary import WindowSummary

    s = WindowSummary.empty(W)
    s.rows = np.zeros(3, s.rows.dtype)
    assert s.select(np.ones(3, bool)) is s
    assert s.select(np.array([True, False, True])).rows.size == 2


def test_path_figures_from_fixed_slots_equal_the_sorted_ones():
    """Per-path delay medians from the plan's slots (each flow's directions gathered by path)
    equal the ones from sorting the window's rows, where paths have several flows, some with
    no answer."""
    from fleetctl.analysis.summaries import path_figures, path_slots
    from fleetctl.model.summary import WindowSummary

    rng = np.random.default_rng(2)
    n_flows, n_paths = 600, 150
    flows = np.zeros(n_flows, FLOW_DTYPE)
    flows["flow"] = np.arange(n_flows)
    flows["src_nic"], flows["dst_nic"] = rng.integers(0, 8, n_flows), rng.integers(8, 16, n_flows)
    flows["fwd_path"] = rng.integers(0, n_paths, n_flows)
    flows["rev_path"] = np.where(rng.random(n_flows) < 0.1, -1, rng.integers(0, n_paths, n_flows))
    s = WindowSummary.empty(W)
    s.rows = np.zeros(500, s.rows.dtype)
    s.rows["window"] = 7
    s.rows["flow"] = rng.permutation(n_flows)[:500]
    s.rows["sent"] = rng.integers(1, 30, 500)
    s.rows["answered"] = np.where(rng.random(500) < 0.2, 0, s.rows["sent"] - 1)
    s.rows["received"] = s.rows["sent"]
    s.rows["fwd"], s.rows["rev"] = rng.integers(5_000, 90_000, (2, 500))
    nic_host = np.arange(16) // 2
    slots = path_slots(flows, n_paths)
    assert max(m.shape[1] for _, m in slots.groups.by_size) > 3  # paths with several flows
    ref = path_figures(s, flows, n_paths, nic_host)
    got = path_figures(s, flows, n_paths, nic_host, slots=slots)
    assert (got.sent == ref.sent).all() and (got.lost == ref.lost).all()
    for a, b in ((got.p50_us, ref.p50_us), (got.p99_us, ref.p99_us)):
        assert np.array_equal(np.isnan(a), np.isnan(b)) and np.nanmax(np.abs(a - b)) <= 1e-3


def _encoded_summary(rec: dict) -> dict:
    """An agent batch's "summary" of `rec`, encoded as the agent encodes it (agent._summary)."""
    from fleetctl.mesh.records import b64, b64_bytes
    from fleetctl.mesh.summary import RECEIVED_FIELDS, RECEIVED_ROW, pack

    rows, bins = summarize(_as_arrays(rec), W, 10, loops={})
    got = received_counts(array("I", rec["flow"].tolist()), array("q", rec["t1"].tolist()), W)
    return {"window_ns": W, "bins": 10,
            "rows": {"n": len(rows["flow"]), "data": "".join(b64_bytes(pack(rows, SUMMARY_FIELDS, ROW)))},
            "row_bins": {"n": len(bins), "data": "".join(b64(bins))},
            "received": {"n": len(got["flow"]),
                         "data": "".join(b64_bytes(pack(got, RECEIVED_FIELDS, RECEIVED_ROW)))}}


def test_summaries_beyond_the_cap_shed_the_oldest_window_and_the_cap_holds_the_lag():
    """The pending summaries' cap holds every flow for the window being closed and those its
    lag lets in (a fixed 625,000 rows shed the window about to close at 1,280 x 8); beyond it
    the oldest window is shed and counted, and the coordinator counts and logs it."""
    from types import SimpleNamespace

    from fleetctl.lens.coordinator import Coordinator
    from fleetctl.lens.ingest import MAX_PENDING, summary_rows_cap

    assert summary_rows_cap(317_440, 2.3, 1.0) == 5 * 317_440
    assert summary_rows_cap(100, 2.3, 1.0) == MAX_PENDING // 8
    flows = np.zeros(3, FLOW_DTYPE)
    flows["flow"], flows["dst_nic"] = [0, 1, 2], 1
    rec = _records()  # 3 flows over windows 5, 6 and 7: 9 rows
    ing = Ingest(flows, max_summary_rows=6)
    ing.add("n1", {"summary": _encoded_summary(rec)}, 8.0)
    assert sorted(ing.summaries) == [6, 7]
    assert ing.dropped == int(((rec["t1"] >= 5 * W) & (rec["t1"] < 6 * W)).sum())
    logged = []
    coord = SimpleNamespace(ingest=ing, counters={}, _ingest_seen=(None, 0, 0, 0),
                            _shed_logged=float("-inf"), log=logged.append)
    Coordinator._note_ingest(coord, 9.0)
    assert coord.counters == {"probes_shed": ing.dropped} and "shed" in logged[0]
    Coordinator._note_ingest(coord, 10.0)  # nothing new: the count stays, no second line
    assert coord.counters == {"probes_shed": ing.dropped} and len(logged) == 1
    whole = Ingest(flows, max_summary_rows=summary_rows_cap(len(flows), 2.3, 1.0))
    whole.add("n1", {"summary": _encoded_summary(rec)}, 8.0)
    assert sorted(whole.summaries) == [5, 6, 7] and whole.dropped == 0


def test_health_tables_of_every_host_at_once_keep_what_each_host_alone_would():
    """The window's health tables from all hosts' rows in one array equal the per-host rule:
    rows ending before the window's reach dropped, the last MAX_HEALTH_ROWS of the rest kept,
    those starting within the reach handed on."""
    from fleetctl.lens.ingest import MAX_HEALTH_ROWS

    fields = list(agent.HEALTH_FIELDS)
    it, idur = fields.index("t_start_ns"), fields.index("duration_s")
    t0 = 1_800_000_000 * 10**9
    rng = np.random.default_rng(8)
    ing = Ingest(np.zeros(4, dtype=FLOW_DTYPE))
    ing.set_fields(fields)
    sent = {}
    for h in range(30):
        node = f"node{h}"
        for _ in range(int(rng.integers(1, 6))):  # batches of 1..40 rows, 0..60 s on
            n = int(rng.integers(1, 40))
            rows = np.zeros((n, len(fields)))
            rows[:, it] = t0 + np.sort(rng.uniform(0, 60, n)) * 1e9
            rows[:, idur] = 0.25
            ing._note_health(node, {"health": rows.tolist()})
            sent.setdefault(node, []).append(rows)
    a, b = t0 + 30 * 10**9, t0 + 31 * 10**9
    _, health = ing.close(a, b)
    for node, parts in sent.items():
        rows = np.concatenate(parts)
        rows = rows[rows[:, it] + rows[:, idur] * 1e9 >= a - 2e9][-MAX_HEALTH_ROWS:]
        kept = np.concatenate(list(ing.health[node])) if ing.health[node] else np.zeros((0, len(fields)))
        assert np.array_equal(kept, rows)
        inside = rows[rows[:, it] <= b + 2e9]
        got = health[node]["windows"] if node in health else np.zeros((0, len(fields)))
        assert np.array_equal(got, inside)
