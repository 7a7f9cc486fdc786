"""Sampled debug records (lens.debug_records): the agents' selection (a hash of the flow id: the
same flows everywhere, the share respected, a sampled flow whole, the summaries unchanged, a
bound per batch), the coordinator's decode (hostile parts counted, never raised, never touching
the summaries), its window join, and the rotating HDF5 store (atomic, bounded, readable)."""

from __future__ import annotations

import base64
import io
import json
import os
import time
import zlib

import h5py
import numpy as np
import pytest

from fleetctl.errors import DataError, UsageError
from fleetctl.lens import debugstore
from fleetctl.lens.debugrecords import DebugCollector, sampled
from fleetctl.lens.debugstore import DebugStore, debug_files, read_file, read_records
from fleetctl.lens.ingest import Ingest
from fleetctl.lens.options import LensOptions
from fleetctl.mesh import agent
from fleetctl.mesh.collect import StreamDecoder, decode_debug, parse_stream
from fleetctl.mesh.records import ANSWERED, UNANSWERED
from fleetctl.model.fabric import FLOW_DTYPE, PROBE_DTYPE
from fleetctl.nodeset import parse_nodeset
from test_mesh_agent import config, free_port, start
from test_mesh_agent_stream import read_stream

W = 1_000_000_000
T0 = 1_800_000_000 * W  # a window boundary


# ---------------------------------------------------------------- the agent's selection
def test_the_sample_is_a_fixed_share_of_flows():
    flows = range(200_000)
    one = {f for f in flows if agent.debug_sampled(f, 0.01)}
    assert 0.009 < len(one) / 200_000 < 0.011
    assert one == {f for f in flows if agent.debug_sampled(f, 0.01)}  # every host, every run
    two = {f for f in flows if agent.debug_sampled(f, 0.02)}
    assert one < two  # a larger share keeps the smaller one's flows
    assert not any(agent.debug_sampled(f, 0.0) for f in flows)
    assert all(agent.debug_sampled(f, 1.0) for f in range(1000))
    # a pair's 8 source ports are neighbouring ids: spread, not sampled together
    assert max(sum(agent.debug_sampled(b + j, 0.01) for j in range(8))
               for b in range(0, 200_000, 8)) <= 2
    # the coordinator's vectorized check is the same function
    ids = np.arange(200_000, dtype=np.uint32)
    assert set(ids[sampled(ids, 0.01)].tolist()) == one


def _config(share: float, pairs: int = 64, output: str = "summary") -> dict:
    """Node a sends `pairs` pairs x 8 source ports and answers as many."""
    cfg = config(free_port())
    cfg.update(output=output, debug_records=share, sports=[1000 + j for j in range(8)],
               summary_window_s=1.0, ring_records=1 << 17,
               pairs=[[8 * k, 0, 1, "127.0.0.2"] for k in range(pairs)]
               + [[8 * (pairs + k), 1, 0, "127.0.0.1"] for k in range(pairs)])
    return cfg


def _fill(ag: agent.Agent, per_flow: int, lost_every: int = 0) -> None:
    """`per_flow` records of every flow `ag` sends within one window from T0, and the answer log
    of every flow it answers."""
    rec, rng = ag.rec, np.random.default_rng(1)
    sent = sorted(f + j for f, _s, _d, _a in ag.pairs for j in range(len(ag.sports)))
    step = W // (per_flow * len(sent) + 1)
    # as on a fabric: send times a few us off the schedule, a 0.4 ms clock offset, us of jitter
    jitter = rng.integers(0, 20_000, (per_flow * len(sent), 4)).tolist()
    for k in range(per_flow * len(sent)):
        pos, flow = rec.n & rec.mask, sent[k % len(sent)]
        t1 = T0 + k * step + jitter[k][0] // 4
        ok = not lost_every or k % lost_every
        rec.flow[pos], rec.seq[pos], rec.slot[pos], rec.t1[pos] = flow, k // len(sent), rec.n, t1
        t2 = t1 + 400_000 + 5_000 + jitter[k][1]
        t3 = t2 + 3_000 + jitter[k][2] // 4
        rec.t2[pos], rec.t3[pos], rec.t4[pos] = (t2, t3, t3 - 400_000 + 5_000 + jitter[k][3]) \
            if ok else (0, 0, 0)
        rec.state[pos] = ANSWERED if ok else UNANSWERED
        rec.n += 1
    for k, flow in enumerate(sorted(ag.replay) * per_flow):
        rec.log(flow, k // len(ag.replay), T0 + k)


def _batch(share: float, per_flow: int = 4, pairs: int = 64, lost_every: int = 0,
           output: str = "summary") -> dict:
    out = io.StringIO()
    ag = agent.Agent(_config(share, pairs, output), "a", out)
    _fill(ag, per_flow, lost_every)
    ag.emit(final=True)
    dec = StreamDecoder("a")
    objs = [o for line in out.getvalue().splitlines() for o in dec.feed(line)]
    assert len(objs) == 1
    objs[0]["bytes"] = len(out.getvalue())
    return objs[0]


def test_the_agent_sends_every_record_of_the_sampled_flows_and_the_same_summaries():
    plain, debug = _batch(0.0, lost_every=7), _batch(0.25, lost_every=7)
    assert "debug" not in plain
    assert debug["summary"] == plain["summary"]  # summaries exactly as they were
    fields, keys, dropped = decode_debug(debug["debug"], "a")
    assert dropped == 0
    flows = fields["flow"]
    want = {f for f in range(512) if agent.debug_sampled(f, 0.25)}  # the flows a sends
    assert set(flows.tolist()) == want and len(want) > 100
    assert (np.bincount(flows, minlength=512)[sorted(want)] == 4).all()  # each one whole
    assert (fields["state"] == UNANSWERED).any() and (fields["t2"][fields["state"] == 0] > 0).all()
    answered = {int(k >> np.uint64(32)) for k in keys}  # its answer log: the same sample
    assert answered == {f for f in range(512, 1024) if agent.debug_sampled(f, 0.25)}
    assert (np.unique(keys >> np.uint64(32), return_counts=True)[1] == 4).all()


def test_records_mode_sends_everything_and_no_debug_part():
    batch = _batch(0.25, output="stream")
    assert "debug" not in batch and batch["records"]["n"] == 512 * 4


def test_a_batch_carries_at_most_the_cap_in_whole_flows(monkeypatch):
    monkeypatch.setattr(agent, "MAX_DEBUG_RECORDS", 100)
    batch = _batch(1.0, per_flow=3)
    fields, keys, dropped = decode_debug(batch["debug"], "a")
    flows, counts = np.unique(fields["flow"], return_counts=True)
    assert 97 <= fields["flow"].size <= 100 and (counts == 3).all()  # 33 whole flows
    assert keys.size <= 100
    assert dropped == (512 * 3 - fields["flow"].size) + (512 * 3 - keys.size)
    # the flows kept are those a smaller share picks first: the lowest ranks
    ranks = sorted(agent.debug_rank(f) for f in range(512))
    assert max(agent.debug_rank(int(f)) for f in flows) == ranks[len(flows) - 1]


def test_what_one_percent_costs_a_batch():
    """docs/lens.md, "Sampled debug records": a host sending 64 pairs x 8 ports (512 flows, and
    answering as many) at 4 probes a flow per window, 2,048 records a window."""
    sizes = {share: _batch(share)["bytes"] for share in (0.0, 0.01, 1.0)}
    extra = sizes[0.01] - sizes[0.0]
    sampled_flows = sum(agent.debug_sampled(f, 0.01) for f in range(1024))
    per_record = (sizes[1.0] - sizes[0.0]) / (2 * agent.MAX_DEBUG_RECORDS)
    print(f"\nbatch {sizes[0.0]} B; share 0.01: +{extra} B ({sampled_flows} flows sampled); "
          f"share 1 (capped at 2 x {agent.MAX_DEBUG_RECORDS}): +{sizes[1.0] - sizes[0.0]} B, "
          f"{per_record:.1f} B a record")
    assert 0 < extra < 0.1 * sizes[0.0] and per_record < 40


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_the_agent_refuses_a_share_out_of_range(bad):
    with pytest.raises(ValueError, match="debug_records"):
        agent.Agent(_config(bad), "a")


def test_the_option_is_validated_and_off_in_records_mode():
    LensOptions(debug_records=0.01).validate()
    for bad in (-0.5, 2, float("nan"), "0.1", True):
        with pytest.raises(UsageError, match="lens.debug_records"):
            LensOptions(debug_records=bad).validate()
    assert LensOptions(debug_records=0.01).debug_share == 0.01
    assert LensOptions(debug_records=0.01, agent_output="records").debug_share == 0.0
    assert LensOptions(debug_records=0.01, segments=True).debug_share == 0.0


# ---------------------------------------------------------------- the coordinator's side
def _flows(n: int = 1024) -> np.ndarray:
    """Flow f: a -> b (NICs 0 -> 1) below 512, b -> a above."""
    flows = np.zeros(n, FLOW_DTYPE)
    flows["flow"] = np.arange(n)
    flows["src_nic"] = np.where(flows["flow"] < 512, 0, 1)
    flows["dst_nic"] = 1 - flows["src_nic"]
    flows["sport"] = 1000 + flows["flow"] % 8
    return flows


def test_the_coordinator_joins_a_windows_sampled_records():
    batch = _batch(0.25, lost_every=5)
    coll = DebugCollector(_flows(), 0.25)
    now = T0 / 1e9 + 2
    coll.add("a", batch["debug"], now)
    # node b answers a's sampled flows: a's unanswered probes it logged were lost on the way back
    fields, _keys, _ = decode_debug(batch["debug"], "a")
    lost = fields["state"] == UNANSWERED
    back = {"flow": fields["flow"][lost][::2], "seq": fields["seq"][lost][::2]}
    coll.add("b", {"received": {"n": len(back["flow"]), **{
        k: base64.b64encode(zlib.compress(v.astype("<u4").tobytes())).decode()
        for k, v in back.items()}}}, now)
    probes = coll.close(T0, T0 + W)
    assert probes.dtype == PROBE_DTYPE and probes.size == fields["flow"].size
    assert (np.diff(probes["t_send"]) >= 0).all()
    assert (probes["lost"] == 2).sum() == len(back["flow"])
    assert (probes["lost"] == 1).sum() == lost.sum() - len(back["flow"])
    assert coll.close(T0 + W, T0 + 2 * W).size == 0 and coll.pending == 0
    coll.add("a", batch["debug"], now)  # its window is closed now: late, dropped, counted
    assert coll.counters["debug_records_late"] == fields["flow"].size and coll.pending == 0
    assert coll.counters["debug_batches_malformed"] == 0


def _encoded(values, dtype) -> str:
    return base64.b64encode(zlib.compress(np.asarray(values, dtype).tobytes())).decode()


def _hostile(doc: dict) -> list[dict]:
    """Malformed variants of a good debug part."""
    rec = doc["records"]
    n = rec["n"]
    sampled_flow = next(f for f in range(1024) if not agent.debug_sampled(f, 0.25))
    return [
        "not an object", [], {"records": [1]}, {"records": {"n": "many"}},
        {"records": {"n": float("inf")}}, {"records": {**rec, "n": 10**9}},
        {"records": {**rec, "n": n + 1}},  # arrays shorter than announced
        {"records": {**rec, "t1": "!!notbase64"}},
        {"records": {**rec, "flow": base64.b64encode(zlib.compress(bytes(10**7))).decode()}},
        {"records": {**rec, "state": _encoded([9] * n, "u1")}},
        {"records": {**rec, "flow": _encoded([5000] * n, "<u4")}},  # outside the plan
        {"records": {**rec, "flow": _encoded([sampled_flow] * n, "<u4")}},  # outside the sample
        {**doc, "dropped": -1}, {**doc, "received": {"n": 3, "flow": "", "seq": ""}},
    ]


def test_malformed_debug_parts_are_counted_never_raised_and_never_touch_the_summaries():
    batch = _batch(0.25)
    flows = _flows()
    coll, ing = DebugCollector(flows, 0.25), Ingest(flows)
    now = T0 / 1e9 + 2
    bad = _hostile(batch["debug"])
    for doc in bad:
        coll.add("a", doc, now)
        ing.add("a", {**batch, "debug": doc}, now)  # what the coordinator's _drain does
    assert coll.counters["debug_batches_malformed"] == len(bad) and coll.pending == 0
    assert ing.bad_batches == 0
    s = ing.close_summary(T0, T0 + W)
    assert int(s.rows["sent"].sum()) == len(bad) * 512 * 4  # every batch's summaries, whole
    with pytest.raises(DataError, match="a: debug record counts out of range"):
        decode_debug(bad[5], "a")  # the node named, one line


def test_pending_records_are_bounded(monkeypatch):
    from fleetctl.lens import debugrecords

    monkeypatch.setattr(debugrecords, "MAX_PENDING", 2000)
    batch = _batch(1.0, per_flow=3)  # 1,536 records a batch
    coll = DebugCollector(_flows(), 1.0)
    for _ in range(3):
        coll.add("a", batch["debug"], T0 / 1e9 + 2)
    assert coll.pending == 1536  # the newest batch; the oldest went first
    assert coll.counters["debug_records_shed"] == 2 * 1536


def test_two_real_agents_send_their_sample_beside_the_summaries():
    """End to end over loopback: two agents in summary mode with half the flows sampled; the
    summaries count every probe, the debug records hold every probe of the sampled flows."""
    port = free_port()
    cfg = config(port, rate=100, duration=2.0, linger=2.0, start_in=0.3)  # loaded machines
    cfg.update(output="summary", health_window_s=0.5, echo_timeout_s=2.0, summary_window_s=1.0,
               summary_bins=10, debug_records=0.5)
    procs = [start(cfg, "a"), start(cfg, "b")]
    docs = {n: parse_stream(read_stream(p), n) for n, p in zip("ab", procs)}
    flows = np.array([(f, 0 if f < 4 else 1, 1 if f < 4 else 0, port + 1 + f % 4, -1, -1)
                      for f in range(8)], dtype=FLOW_DTYPE)
    chosen = {f for f in range(8) if agent.debug_sampled(f, 0.5)}
    assert 0 < len(chosen) < 8
    ing, coll = Ingest(flows), DebugCollector(flows, 0.5)
    for node, doc in docs.items():
        for b in doc["batches"]:
            ing.add(node, b, time.time())
            if "debug" in b:
                coll.add(node, b["debug"], time.time())
    sent, probes = 0, []
    for w in sorted(ing.summaries):
        s = ing.close_summary(w * W, (w + 1) * W)
        p = coll.close(w * W, (w + 1) * W)
        sent += int(s.rows["sent"].sum())
        # per sampled flow, the window's records are what its summary row counts
        for f in chosen:
            row = s.rows[s.rows["flow"] == f]
            mine = p[p["flow"] == f]
            assert mine.size == int(row["sent"].sum()), (w, f)
            assert int((mine["lost"] == 0).sum()) == int(row["answered"].sum()), (w, f)
        probes.append(p)
    probes = np.concatenate(probes)
    assert sent == docs["a"]["counters"]["sent"] + docs["b"]["counters"]["sent"]  # as without
    assert set(probes["flow"].tolist()) == chosen
    assert coll.counters["debug_batches_malformed"] == coll.counters["debug_records_late"] == 0


# ---------------------------------------------------------------- the store
NICS = ["node1:mlx5_0", "node2:mlx5_0"]
HOSTS = ["node1", "node2"]


def _window(a_s: float, n: int, flow0: int = 0) -> np.ndarray:
    p = np.zeros(n, PROBE_DTYPE)
    p["flow"] = flow0 + np.arange(n) % 16
    p["src_nic"] = np.where(p["flow"] < 512, 0, 1)
    p["dst_nic"] = 1 - p["src_nic"]
    p["seq"] = np.arange(n)
    p["t_send"] = int(a_s * 1e9) + np.arange(n) * 1000
    p["t_remote_rx"] = p["t_send"] + 7_000
    p["t_remote_tx"] = p["t_send"] + 9_000
    p["t_recv"] = p["t_send"] + 15_000
    p["lost"][::10] = 1
    for k in ("t_remote_rx", "t_remote_tx", "t_recv"):
        p[k][::10] = 0
    return p


def _store(path, **kw) -> DebugStore:
    s = DebugStore(path, **kw)
    s.set_layout(_flows(), NICS, HOSTS)
    return s


def test_the_store_writes_a_file_per_minute_of_windows_atomically(tmp_path):
    d = tmp_path / "debug-records"
    s = _store(d)
    t = 1_800_000_000.0
    written = [s.append(_window(t + i, 50), t + i, t + i + 1) for i in range(150)]
    files = [p for p in written if p is not None]
    assert len(files) == 2 and debug_files(d) == files  # at 60 s and 120 s of windows
    assert files[0].name == "debug-20270115T080000Z.h5"
    assert s.flush() is not None and len(debug_files(d)) == 3  # on stop: the rest
    assert not [p for p in os.listdir(d) if p.endswith(".tmp")]
    probes, table, t0, t1 = read_file(files[0])
    assert probes.size == 60 * 50 and (t0, t1) == (t, t + 60)
    assert table[3] == ("node1:mlx5_0", "node1", "node2:mlx5_0", "node2", 1003)
    assert s.counters["debug_records_written"] == 150 * 50 and s.counters["debug_files_written"] == 3
    assert s.flush() is None  # nothing buffered: no empty file
    for _ in range(3):  # windows without a sampled record write nothing either
        s.append(np.zeros(0, PROBE_DTYPE), t + 200, t + 260)
    assert len(debug_files(d)) == 3


def test_the_store_rolls_at_the_record_cap_and_keeps_the_newest_within_its_caps(tmp_path, monkeypatch):
    monkeypatch.setattr(debugstore, "MAX_FILE_RECORDS", 100)
    d = tmp_path / "dbg"
    s = _store(d, max_files=3)
    t = 1_800_000_000.0
    for i in range(10):
        s.append(_window(t + i, 60), t + i, t + i + 1)  # 2 windows do not fit one file
    files = debug_files(d)
    assert len(files) == 3 and s.counters["debug_files_removed"] == 9 - 3
    assert all(read_file(p)[0].size == 60 for p in files)
    newest = read_file(files[-1])[0]["t_send"].min()
    assert newest == int((t + 8) * 1e9)  # the newest kept, the oldest removed
    cap = int(2.5 * os.path.getsize(files[-1]))
    s2 = _store(d, max_bytes=cap)
    s2.append(_window(t + 20, 60), t + 20, t + 21)
    last = s2.flush()
    kept = debug_files(d)  # by bytes: the oldest go, the one just written stays
    assert last == kept[-1] and 1 <= len(kept) <= 2 and s2.counters["debug_files_removed"] >= 2
    assert sum(os.path.getsize(p) for p in kept) <= cap


def test_a_write_that_fails_is_a_data_error_and_its_records_are_counted(tmp_path):
    (tmp_path / "file").write_text("")
    s = _store(tmp_path / "file" / "debug-records")  # its directory cannot be made
    t = 1_800_000_000.0
    s.append(_window(t, 60), t, t + 1)
    with pytest.raises(DataError, match="cannot write"):  # lens logs it once, counts it
        s.flush()
    assert s.counters["debug_records_unwritten"] == 60 and s.n == 0  # not retried


def test_a_new_plan_writes_the_buffer_with_its_own_flows(tmp_path):
    s = _store(tmp_path)
    t = 1_800_000_000.0
    s.append(_window(t, 20), t, t + 1)
    flows = _flows()
    flows["sport"] += 1
    s.set_layout(flows, ["x:0", "y:0"], ["x", "y"])
    s.append(_window(t + 1, 20), t + 1, t + 2)
    s.flush()
    first, second = (read_file(p)[1] for p in debug_files(tmp_path))
    assert first[0][0] == "node1:mlx5_0" and second[0][:2] == ("x:0", "x")


def test_reading_filters_and_limits(tmp_path):
    s = _store(tmp_path)
    t = 1_800_000_000.0
    for i in range(130):
        s.append(_window(t + i, 16, flow0=0 if i % 2 else 512), t + i, t + i + 1)
    s.flush()
    doc = read_records(tmp_path, limit=10)
    assert len(doc["records"]) == 10 and doc["files"] == 3 and doc["files_read"] == 1  # newest
    assert doc["records"][-1]["t_send_ns"] == int((t + 129) * 1e9) + 15 * 1000
    r = read_records(tmp_path, flow=3, limit=1000)["records"]
    assert len(r) == 65 and {x["flow"] for x in r} == {3}
    assert r[0]["src"] == "node1:mlx5_0" and r[0]["dst_host"] == "node2"
    ok = [x for x in r if x["result"] == "answered"]
    assert ok and ok[0]["rtt_us"] == 13.0 and ok[0]["fwd_raw_us"] == 7.0
    lost = read_records(tmp_path, limit=10**6)["records"]
    assert {x["result"] for x in lost} == {"answered", "lost out"}
    assert all(x["rtt_us"] is None for x in lost if x["result"] != "answered")
    since = read_records(tmp_path, since=t + 125, limit=10**6)
    assert len(since["records"]) == 5 * 16 and since["files_read"] == 1
    assert read_records(tmp_path, nodes=parse_nodeset("node9"), limit=100)["records"] == []
    assert len(read_records(tmp_path, nodes=parse_nodeset("node[1,7]"), limit=10**6)["records"]) \
        == 130 * 16
    assert read_records(tmp_path / "missing")["records"] == []


def test_planted_files_are_skipped_with_their_reason(tmp_path):
    s = _store(tmp_path)
    t = 1_800_000_000.0
    odd = _window(t, 20)
    odd["t_send"][0] = -(2**62)  # an absurd time is printed, never a traceback
    s.append(odd, t, t + 1)
    good = s.flush()
    (tmp_path / "debug-20270101T000000Z.h5").write_bytes(b"not hdf5")
    os.mkfifo(tmp_path / "debug-20270101T000001Z.h5")  # not listed: never opened
    (tmp_path / "debug-20270101T000002Z.h5").symlink_to(good)  # not listed either
    with h5py.File(tmp_path / "debug-20270101T000003Z.h5", "w") as f:
        f.attrs.update({"format": debugstore.FORMAT, "version": 1, "t_start": t, "t_end": t})
        f.create_dataset("probes", data=np.zeros(3, [("flow", "<i4")]))
    with h5py.File(tmp_path / "debug-20270101T000004Z.h5", "w") as f:
        f.attrs["format"] = "something else"
    (tmp_path / ".debug-20270101T000005Z.h5.abc.tmp").write_bytes(b"partial")
    doc = read_records(tmp_path)
    assert len(doc["records"]) == 20 and doc["files"] == 4
    assert doc["records"][0]["time"].startswith("1823-")
    reasons = sorted(x["error"].split(": ", 1)[1] for x in doc["skipped"])
    assert len(reasons) == 3 and any("dtype" in r for r in reasons), reasons
    assert any("not a version-1" in r for r in reasons)
    assert any("not a readable" in r for r in reasons)
    DebugStore(tmp_path)  # a new coordinator removes the partial file of a crashed write
    assert not (tmp_path / ".debug-20270101T000005Z.h5.abc.tmp").exists()
    assert json.dumps(doc)  # what --format json prints


# ---------------------------------------------------------------- the coordinator
def _coordinator(state_dir, share: float, logs: list):
    from types import SimpleNamespace

    from fleetctl.lens.coordinator import Coordinator

    c = Coordinator(SimpleNamespace(name="lab"), ["node1", "node2"], None,
                    LensOptions(state_dir=str(state_dir), debug_records=share), outputs=None,
                    log=logs.append)
    c.plan = SimpleNamespace(flows=_flows(), topo=SimpleNamespace(nics=NICS, nic_host=HOSTS))
    c.ingest = Ingest(c.plan.flows)
    c._build_debug()
    return c


def test_the_coordinator_writes_each_windows_sample_and_counts_it(tmp_path):
    logs: list[str] = []
    c = _coordinator(tmp_path, 0.25, logs)
    batch = _batch(0.25, lost_every=5)
    now = T0 / 1e9 + 2
    for b in (batch, {**batch, "debug": {"records": {"n": -1}}}, {**batch, "debug": "x"}):
        c.queue.put_nowait(("node1", b, now))
    c._drain(0.01)
    c._close_debug(T0 / 1e9, T0 / 1e9 + 1)
    c._debug_guard(c.debug_store.flush)  # what run() does when it stops
    doc = read_records(tmp_path / "debug-records", limit=10**6)
    n = decode_debug(batch["debug"], "a")[0]["flow"].size
    assert len(doc["records"]) == n and not doc["skipped"]
    assert c.counters["debug_records_written"] == n and c.counters["debug_files_written"] == 1
    assert c.counters["debug_batches_malformed"] == 2 and c.counters["batches"] == 3
    assert c.ingest.bad_batches == 0 and int(c.ingest.close_summary(T0, T0 + W).rows["sent"].sum()) \
        == 3 * 512 * 4  # every batch's summaries
    assert not logs


def test_a_store_that_cannot_write_is_logged_once_never_raised(tmp_path):
    logs: list[str] = []
    (tmp_path / "debug-records").write_text("a file where the directory goes")
    c = _coordinator(tmp_path, 0.25, logs)
    c.queue.put_nowait(("node1", _batch(0.25), T0 / 1e9 + 2))
    c._drain(0.01)
    c._close_debug(T0 / 1e9, T0 / 1e9 + 1)
    c._debug_guard(c.debug_store.flush)
    t = T0 / 1e9 + 1
    c._debug_guard(lambda: c.debug_store.append(_window(t, 10), t, t + 1))
    c._debug_guard(c.debug_store.flush)
    assert c.counters["debug_write_errors"] == 2 and len(logs) == 1  # logged once
    assert "cannot write the debug records" in logs[0]
    assert c.counters["debug_records_unwritten"] == c.counters["debug_records_in"] + 10


def test_off_means_no_collector_and_the_agents_are_told_the_share(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from fleetctl.lens import coordinator

    assert _coordinator(tmp_path, 0.0, []).debug is None
    setup = SimpleNamespace(
        warnings=[], topo=None, plan=SimpleNamespace(pairs=[]), rate=10.0, hosts=[],
        disc=SimpleNamespace(flows=_flows(), paths=[]),
        agent_config=lambda **extra: {"nodes": {}, "pairs": [], "loops": [], **extra})
    monkeypatch.setattr(coordinator, "prepare", lambda *a, **k: setup)
    for opts, share in ((LensOptions(debug_records=0.01), 0.01),
                        (LensOptions(debug_records=0.01, agent_output="records"), 0.0)):
        plan = coordinator.LensPlan(SimpleNamespace(name="lab"), [], None, opts, print)
        assert plan.config_for("node1", 0.0)["debug_records"] == share
