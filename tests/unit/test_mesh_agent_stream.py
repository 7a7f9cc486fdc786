"""Streaming output: record batches leave a bounded ring while the agent runs; the collector
joins them into the same records as the one-shot document; clock sources; hostile streams."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from fleetctl.errors import DataError
from fleetctl.lab.clock import HostClock
from fleetctl.mesh import agent
from fleetctl.mesh.collect import StreamDecoder, decode, parse_stream, probe_records
from fleetctl.model.fabric import FLOW_DTYPE
from test_mesh_agent import config, finish, free_port, start


def read_stream(proc, timeout=15):
    out = proc.stdout.read()
    proc.wait(timeout)
    assert proc.returncode == 0, proc.stderr.read()
    return out


def test_two_streaming_agents_emit_batches_while_running():
    port = free_port()
    # Generous echo timeout and linger: on a loaded 2-core CI machine (the unit tests in two
    # processes) an echo took over a second once; every echo is counted below.
    cfg = config(port, rate=100, duration=2.0, linger=3.0, start_in=0.2)
    cfg.update(output="stream", health_window_s=0.5, echo_timeout_s=3.0)
    procs = [start(cfg, "a"), start(cfg, "b")]
    texts = {n: read_stream(p) for n, p in zip("ab", procs)}
    docs = {n: parse_stream(t, n) for n, t in texts.items()}
    for node, doc in docs.items():
        assert all(line.startswith("FLS1 ") and len(line) <= 430
                   for line in texts[node].splitlines())
        batches = doc["batches"]
        assert len(batches) >= 4  # one per 0.5 s window, not one at exit
        # records left during the run: the early batches already hold answered records
        assert sum(b["records"]["n"] for b in batches[:3]) > 0
        assert sum(b["records"]["n"] for b in batches) == doc["counters"]["sent"]
        assert len(doc["health"]["windows"]) == len(batches)
        assert doc["counters"]["echoes"] == doc["counters"]["sent"] >= 190
    flows = np.array([(f, 0 if f < 4 else 1, 1 if f < 4 else 0, port + 1 + f % 4, -1, -1)
                      for f in range(8)], dtype=FLOW_DTYPE)
    probes = probe_records(docs, flows, ["a", "b"], set())
    assert len(probes) == docs["a"]["counters"]["sent"] + docs["b"]["counters"]["sent"]
    assert (probes["lost"] == 0).all() and (probes["t_recv"] > probes["t_send"]).all()
    fields, keys = decode(docs["b"], "b")
    assert len(keys) == docs["b"]["counters"]["answered"]  # responder logs joined too


def test_stream_and_document_decode_to_the_same_records():
    port = free_port()
    cfg = config(port, rate=50, duration=0.6, linger=0.3, start_in=0.1, pairs=False)
    doc = finish(start(cfg, "a"))  # nobody answers: every record unanswered
    cfg = dict(cfg, output="stream", start_at=cfg["start_at"] + 1.5, health_window_s=0.2)
    sdoc = parse_stream(read_stream(start(cfg, "a")), "a")
    f1, _ = decode(doc, "a")
    f2, _ = decode(sdoc, "a")
    assert len(f1["flow"]) == doc["counters"]["sent"] and len(f2["flow"]) == \
        sdoc["counters"]["sent"]
    for name in ("flow", "seq", "state"):
        n = min(len(f1[name]), len(f2[name]))
        assert (f1[name][:n] == f2[name][:n]).all()
    assert (f2["state"] == agent.UNANSWERED).all()


def test_ring_is_bounded_and_overflow_is_counted_not_lost(monkeypatch):
    port = free_port()
    cfg = config(port, rate=400, duration=0.5, linger=0.2, start_in=0.05, pairs=False)
    cfg.update(output="stream", ring_records=64, echo_timeout_s=5.0, health_window_s=0.5)
    out = io.StringIO()
    a = agent.Agent(cfg, "a", out)
    assert a.rec.size == 64 and len(a.r_t1) == 64 and len(a.rec.state) == 64
    a.open()
    try:
        a.loop()
    finally:
        a.close()
    a.finish_stream()
    doc = parse_stream(out.getvalue(), "a")
    c = doc["counters"]
    assert c["sent"] > 64 * 2 and c["ring_forced"] >= c["sent"] - 64  # no echo: forced out
    assert sum(b["records"]["n"] for b in doc["batches"]) == c["sent"]  # every record emitted
    assert sum(dict(zip(doc["health"]["fields"], r))["ring_forced"]
               for r in doc["health"]["windows"]) == c["ring_forced"]


def test_document_mode_keeps_the_max_records_bound():
    port = free_port()
    cfg = config(port, rate=1000, duration=0.5, linger=0.1, start_in=0.05, max_records=30,
                 pairs=False)
    cfg["ring_records"] = 16
    a = agent.Agent(cfg, "a")
    a.open()
    try:
        a.loop()
    finally:
        a.close()
    doc = a.report()
    assert doc["records"]["n"] == 30 and doc["counters"]["records_dropped"] > 300


def _lines(obj, k=0, piece=7):
    text = json.dumps(obj, separators=(",", ":"))
    parts = [text[i:i + piece] for i in range(0, len(text), piece)]
    return [f"FLS1 {k} {i} {len(parts)} {p}" for i, p in enumerate(parts)]


def test_stream_decoder_joins_pieces_and_ignores_foreign_lines():
    dec = StreamDecoder("n1")
    got = []
    for line in ["srun: warning: something", *_lines({"kind": "batch", "x": 1}),
                 *_lines({"kind": "end"}, k=1)]:
        got += dec.feed(line)
    assert got == [{"kind": "batch", "x": 1}, {"kind": "end"}] and dec.ignored == 1


@pytest.mark.parametrize("lines,what", [
    (["FLS1 0 x 1 {}"], "malformed"),
    (["FLS1 0 1 2 {\"ki", "FLS1 0 0 2 nd\":1}"], "out of sequence"),
    (["FLS1 0 0 1 {not json"], "not JSON"),
    (["FLS1 0 0 1 []"], "no known kind"),
    (["FLS1 0 0 999999999 x"], "too large"),
    (_lines({"kind": "batch"}, k=3) + _lines({"kind": "batch"}, k=2), "out of order"),
])
def test_stream_decoder_refuses_garbled_streams(lines, what):
    dec = StreamDecoder("n1")
    with pytest.raises(DataError, match=what):
        for line in lines:
            dec.feed(line)


def test_parse_stream_needs_the_end_record_unless_told():
    text = "\n".join(_lines({"kind": "batch", "records": {"n": 0}, "health": [[1]]}))
    with pytest.raises(DataError, match="no end record"):
        parse_stream(text, "n1")
    doc = parse_stream(text, "n1", require_end=False)
    assert len(doc["batches"]) == 1 and doc["health"]["windows"] == [[1]]
    with pytest.raises(DataError, match="inside an object"):
        parse_stream(text.rsplit("\n", 1)[0] if "\n" in text else "FLS1 0 0 2 {", "n1")


def test_clock_sources():
    assert agent.clock_source(None).host(123) == 123
    assert agent.clock_source({"source": "system"}).host(5) == 5
    c = agent.clock_source({"source": "offset", "offset_ms": 2.0, "drift_ppm": 100.0, "t0": 0.0})
    assert c.host(10**9) == pytest.approx(10**9 + 2_000_000 + 100_000, abs=1)
    assert isinstance(agent.clock_source({"offset_ms": 1.0}), agent.OffsetClock)  # version 1
    for bad in ({"source": "lab-state-file"}, {"source": "offset", "drift_ppm": 1e6}):
        with pytest.raises(ValueError):
            agent.clock_source(bad)


def _site_with_clock_file(tmp_path, text: str | None):
    from fleetctl.config import parse_site

    lab = "" if text is None else str(tmp_path / "clock.json")
    if text is not None:
        (tmp_path / "clock.json").write_text(text)
    return parse_site(f'[cluster]\nname = "t"\n[lab]\nclock_file = "{lab}"\n', str(tmp_path / "site.toml"))


def test_injected_clocks_are_plain_data_and_plain_offset_sources(tmp_path):
    """The lab's injected clocks reach the probe engine as a data file the site file names
    (never the lab's code or state); each becomes a plain "offset" clock source of the agent."""
    import json

    from fleetctl.mesh.collect import injected_clocks

    truth = {"t0": 100.0, "hosts": {"node1": {"offset_ms": -3.0, "drift_ppm": 20.0}}}
    got, entries = injected_clocks(_site_with_clock_file(tmp_path, json.dumps(truth)))
    assert got == truth
    assert entries == {"node1": {"source": "offset", "offset_ms": -3.0, "drift_ppm": 20.0, "t0": 100.0}}
    hc = HostClock("node1", -3.0, 20.0, 100.0)
    t = 1000.0
    assert agent.clock_source(entries["node1"]).host(int(t * 1e9)) == \
        pytest.approx(int((t + hc.offset_at(t)) * 1e9), abs=2)
    assert injected_clocks(_site_with_clock_file(tmp_path, None)) == (None, {})


@pytest.mark.parametrize("text", ["[" * 70_000, '{"t0": "x", "hosts": {}}', '{"t0": 1, "hosts": {"n": {"offset_ms": "1"}}}',
                                  "not json"])
def test_a_damaged_clock_file_is_a_data_error(tmp_path, text):
    from fleetctl.errors import DataError
    from fleetctl.mesh.collect import injected_clocks

    with pytest.raises(DataError):
        injected_clocks(_site_with_clock_file(tmp_path, text))


def test_record_ring_wraps_and_hands_out_records_in_send_order():
    from fleetctl.mesh.records import PENDING, RecordRing, spans

    ring = RecordRing(10, 5, keep=True)
    assert ring.size == 16 and ring.log_size == 16  # powers of two, at least 16
    assert spans(14, 5, 16) == [(14, 16), (0, 3)] and spans(3, 0, 16) == []
    taken = []
    for idx in range(40):  # 40 records through a 16-slot ring, 5 at a time
        pos = idx & ring.mask
        ring.flow[pos], ring.t1[pos], ring.state[pos] = idx, idx, PENDING
        ring.n += 1
        if idx % 2 == 0:
            ring.state[pos] = agent.ANSWERED
        assert not ring.full() or ring.n - ring.emitted == 16
        if ring.n - ring.emitted == 5:
            upto = ring.final_upto(limit_t1=idx - 2)  # records with t1 < idx - 2 time out
            taken.append(ring.take(upto))
    taken.append(ring.take(ring.n))
    flows = [f for t in taken for f in t["flow"]]
    states = [s for t in taken for s in t["state"]]
    assert flows == list(range(40))
    assert states == [agent.ANSWERED if f % 2 == 0 else agent.UNANSWERED for f in flows]
    assert list(ring.acc["flow"]) == flows  # document mode keeps every batch
