#!/usr/bin/env python3
"""The scale harness (issue 22): the real lens coordinator, in its own process, driven by many
synthetic agents in one process that speak the real agent protocol; prints JSON.

- **Fabric**: site_configs/gen_rail.py (8 NICs a host, 8 rail leaves per scalable unit of up to 256
  hosts, 16 spines) with addresses added to every cable (NIC side and switch side).
- **Coordinator**: `lens.coordinator.Coordinator` with `agents = "registered"` on 127.0.0.1, the
  site's probe budget (2,000 probes/s a host, k = 3), 1 s windows, its real outputs (event log,
  status, state). Its flows are traced through a transport that answers the trace agent's
  payload with the paths the fabric's switches would take (per-switch seeded ECMP hashes of the
  5-tuple, as switches hash): fleetctl's own fan-out, decoding and path resolution run on them.
- **Agents**: one process registers every host with `lens.nodeagent.register` (the handshake of
  `fleetctl lens agent`), gets each host's configuration, routes each of its flows the same way,
  and every health window (0.25 s) sends each host's batch over its TCP connection in the agent's
  FLS1 framing: a health row, and once a window is final its per-flow summary rows and the
  responder's counts (mesh/summary.py's wire format). The summaries are drawn per flow, not per
  probe: probes ~ Poisson(rate), losses binomial over the path's elements, medians and tightest
  bounds of exponential jitter over per-element delays, clock offsets (up to 2 ms) and drifts (up
  to 30 ppm) per host, rare drops (2e-5 per element crossed) everywhere.
- **Scenario**: a clean stretch (during which `--restarts` agents drop their connection and
  register again 2 s later, as a restarted service does), then a 2 % loss on one leaf-spine cable
  (both directions) for `--fault-for` seconds, then clean again.
- **Measured** in the coordinator's process: each window's analysis (Coordinator._close) and
  the ingest of every batch (Coordinator._drain), RSS every 10 s (and its slope over the second
  half), the events it wrote; time to culprit = the fault's start to the event's open record.

    python benchmarks/lens_harness.py --hosts 128,512,1280 [--duration 90] [--fault-at 40]
    python benchmarks/lens_harness.py --hosts 1280 --duration 3600 --fault-at 0   # a clean soak
    python benchmarks/lens_harness.py --hosts 1280 --pin   # the coordinator alone on one CPU
    python benchmarks/lens_harness.py --hosts 512 --shards 2    # two shard coordinators + lens merge
    python benchmarks/lens_harness.py --hosts 512 --shards 2 --fault-kind delay   # the spine 200 us slow
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import math
import multiprocessing
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from array import array
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetctl.mesh.collect import summary_wire_dtypes  # noqa: E402
from fleetctl.mesh.health import HEALTH_FIELDS  # noqa: E402
from tests.support.fabrics import mix64  # noqa: E402  (the per-switch ECMP hash)

ROW_DTYPE, RECEIVED_ROW_DTYPE = summary_wire_dtypes()
BACKGROUND_LOSS = 2e-5
FAULT_LOSS = 0.02
FAULT_DELAY_S = 200e-6  # --fault-kind delay: every path through the faulty element this much slower
STREAM_PIECE = 400  # as mesh.agent
JITTER_S = 5e-6
TEMPLATES = 8  # fault-free windows drawn, then reused with each window's times and clocks
# --pin: the coordinator's process on one CPU (its threads and its clock-fit worker inherit it),
# the agents' on the others: the issue's "one core" for the coordinator, measured in real time
PIN: dict[str, set[int]] = {}


# ---------------------------------------------------------------- the fabric
HEALTH_WINDOW: list[float] = [0.25]  # lens.health_window_s: the agents' batch period (--health-window)


def site_text(hosts: int, state_dir: str, shard_max_hosts: int = 0, sus: int = 0) -> str:
    """gen_rail's site file for `hosts` hosts in `sus` scalable units (default: of up to 256
    hosts), every cable given a /30 (NIC or lower end .1)."""
    sus = sus or max(1, math.ceil(hosts / 256))
    text = subprocess.run([sys.executable, str(ROOT / "site_configs" / "gen_rail.py"), "--sus",
                           str(sus), "--nodes-per-su", str(hosts // sus), "--rails", "8",
                           "--spines", "16"], capture_output=True, text=True, check=True).stdout
    out, link = [], 0
    base = int(ipaddress.ip_address("100.64.0.0"))
    for line in text.splitlines():
        out.append(line)
        if re.match(r'b = "', line):
            a = base + 4 * link
            out += [f'a_address = "{ipaddress.ip_address(a + 1)}"',
                    f'b_address = "{ipaddress.ip_address(a + 2)}"']
            link += 1
    out += ["", "[lens]", f'state_dir = "{state_dir}"', f"health_window_s = {HEALTH_WINDOW[0]}"]
    if shard_max_hosts:
        out.append(f"shard_max_hosts = {shard_max_hosts}")
    return "\n".join(out) + "\n"


class Fabric:
    """Routing as the switches would do it: at each switch, the next hop among the equal-cost
    ones by a hash of the flow's 5-tuple with that switch's own seed."""

    def __init__(self, cluster, seed: int = 7):
        from fleetctl.model.fabric import Topology

        self.cluster = cluster
        self.topo = topo = Topology.from_site(cluster)
        rng = np.random.default_rng(seed)
        self.seeds = [int(x) for x in rng.integers(0, 2**63, len(topo.switch_tier))]
        self.nic_of_addr: dict[str, str] = {}
        self.port_addr: dict[tuple[str, str], str] = {}
        for link in cluster.links.values():
            for ep in (link.a, link.b):
                if ep.address and ep.kind == "switch":
                    self.port_addr[(link.id, ep.device)] = ep.address
                elif ep.address:
                    self.nic_of_addr[ep.address] = ep.element_id

    def route(self, src_nic: str, dst_nic: str, h: int) -> tuple[list[int], list[str]]:
        """(element indices, hop addresses: each switch's ingress port) of one flow."""
        topo = self.topo
        (ssw, up, _), (dsw, _, down) = topo.route_ends(src_nic, dst_nic)
        path, hops = [topo.index("nic", src_nic), up], []
        u, via = ssw, up
        while True:
            sw = topo.switch_id(u)
            hops.append(self.port_addr[(topo.elements[via].id, sw)])
            path.append(topo.index("switch", sw))
            if u == dsw:
                break
            choices = topo.next_hops(u, dsw)
            u, via = choices[mix64(h ^ self.seeds[u]) % len(choices)]
            path.append(via)
        return path + [down, topo.index("nic", dst_nic)], hops

    def route_addr(self, src: str, sport: int, dst: str, dport: int):
        h = mix64((int(ipaddress.ip_address(src)) << 32) ^ (sport << 16) ^ dport
                  ^ (int(ipaddress.ip_address(dst)) << 1))
        return self.route(self.nic_of_addr[src], self.nic_of_addr[dst], h)


class TraceTransport:
    """Answers the trace agent's payload (its embedded configuration: per node the flows it
    sends) with the paths Fabric routes, in the trace agent's output format."""

    name = "harness"

    def __init__(self, fabric: Fabric):
        self.fabric = fabric

    def run(self, nodes, argv, timeout=None, stdin=b"", on_result=None):
        from fleetctl.fanout.result import HostResult

        text = stdin.decode()
        m = re.search(r"^_EMBEDDED_CONFIG = (.*)$", text, re.M)
        cfg = json.loads(json.JSONDecoder().raw_decode(m.group(1))[0])  # a comment may follow
        out = []
        for node in nodes:
            paths = {}
            for key, src, sport, dst, dport, _hops, _dev in cfg["nodes"].get(node, []):
                if key[0] in "fr":
                    paths[key] = self.fabric.route_addr(src, int(sport), dst, int(dport))[1]
            r = HostResult(node, "ok", 0, json.dumps({"paths": paths, "arrived": []}))
            if on_result:
                on_result(r)
            out.append(r)
        return out


# ---------------------------------------------------------------- the coordinator's process
def coordinator_main(site_path: str, key_path: str, port: int, stop_evt, out_path: str,
                     nodes: list[str] | None = None, state_dir: str | None = None):
    if PIN:  # first, before any thread or worker: they inherit the calling thread's mask
        os.sched_setaffinity(0, PIN["coordinator"])
    from fleetctl.config import load_site
    from fleetctl.lens.coordinator import Coordinator
    from fleetctl.lens.options import LensOptions
    from fleetctl.lens.outputs import Outputs

    cluster = load_site(site_path)
    opts = LensOptions.from_site(cluster)
    opts.agents, opts.listen, opts.key_file = "registered", f"127.0.0.1:{port}", key_path
    opts.trace_via = "transport"  # the fabric is synthetic: TraceTransport answers the traces
    if state_dir:  # one shard of several (its nodes, its own state)
        opts.state_dir = state_dir
        Path(state_dir).mkdir(parents=True, exist_ok=True)
    log_file = open(Path(opts.state_dir) / "lens.log", "a")

    def log(m):
        log_file.write(f"{time.strftime('%H:%M:%S')} {m}\n")
        log_file.flush()

    # the harness's own records in the coordinator's process, kept from growing with the run:
    # a float per drain (~70 a second) was 0.15 MB a minute, the "creep" the hour at 512 hosts
    # measured (Python's allocated blocks rose linearly, container objects did not)
    closes, rss = array("d"), []  # (window end, wall s, CPU s) per window, flat
    probes = array("q")  # per window: the probes it analyzed (0: no agent's summary was in)
    drains = [0.0]  # the drains' CPU seconds, summed
    profile = None
    if os.environ.get("HARNESS_PROFILE"):  # where a window's time goes: pstats to that file
        import cProfile

        profile = cProfile.Profile()

    class Timed(Coordinator):
        # wall time, and this thread's CPU time (on 2 cores the agents' process competes for it)
        def _close(self, a, b):
            t0, c0, n0 = time.perf_counter(), time.thread_time(), self.counters.get("windows", 0)
            if profile is not None:
                profile.runcall(super()._close, a, b)
            else:
                super()._close(a, b)
            closes.extend((b, time.perf_counter() - t0, time.thread_time() - c0))
            probes.append(int((self.last_window or {}).get("probes") or 0)
                          if self.counters.get("windows", 0) > n0 else 0)

        def _drain(self, wait):
            c0 = time.thread_time()
            super()._drain(wait)
            drains[0] += time.thread_time() - c0

    stop = threading.Event()
    t_start = time.time()
    if os.environ.get("HARNESS_TRACEMALLOC"):  # what the coordinator's heap gains over the run
        import tracemalloc

        tracemalloc.start(8)
        snaps = []

        def snap():
            stop.wait(180.0)
            snaps.append(tracemalloc.take_snapshot())
            stop.wait()
            diff = tracemalloc.take_snapshot().compare_to(snaps[0], "traceback")
            with open(os.environ["HARNESS_TRACEMALLOC"], "w") as f:
                for stat in diff[:15]:
                    f.write(f"{stat.size_diff / 1024:.1f} KiB in {stat.count_diff} blocks\n")
                    f.write("\n".join(stat.traceback.format()[-6:]) + "\n\n")
        snapper = threading.Thread(target=snap, daemon=True)
        snapper.start()

    census: dict = {}  # HARNESS_CENSUS: Python's own heap over the run (below)

    def sample():
        while not stop.wait(10.0):
            rss.append((time.time() - t_start, _rss_mb(), sys.getallocatedblocks()))
            if os.environ.get("HARNESS_CENSUS") and "first" not in census and \
                    time.time() - t_start > 300:
                census["first"] = _census()
    threading.Thread(target=sample, daemon=True).start()
    threading.Thread(target=lambda: (stop_evt.wait(), stop.set()), daemon=True).start()
    c = Timed(cluster, nodes or cluster.select(None), TraceTransport(Fabric(cluster)), opts,
              Outputs(opts, log, cluster=cluster), log, None)
    owner = None
    if os.environ.get("HARNESS_OWNERS"):  # which of the coordinator's parts hold its memory
        def owners():
            if not stop.wait(float(os.environ.get("HARNESS_OWNERS_AT", "120"))):
                t0, rss_mb = time.perf_counter(), _rss_mb()
                held = _owners(c)
                Path(os.environ["HARNESS_OWNERS"]).write_text(json.dumps(
                    {"rss_mb": round(rss_mb), "walk_s": round(time.perf_counter() - t0, 1),
                     "owners_mb": held}, indent=1))
        owner = threading.Thread(target=owners, daemon=True)
        owner.start()
    c.run(stop)
    if owner is not None:
        owner.join(600)
    if os.environ.get("HARNESS_TRACEMALLOC"):
        snapper.join(120)
    if profile is not None:
        profile.dump_stats(os.environ["HARNESS_PROFILE"])
    if census.get("first"):  # the container types that grew from minute 5 to the end
        first, last = census["first"], _census()
        grew = sorted(((n - first.get(t, 0), t) for t, n in last.items()), reverse=True)[:15]
        Path(os.environ["HARNESS_CENSUS"]).write_text(json.dumps(
            {"grew": [[t, d] for d, t in grew], "blocks_first": first.get("__blocks__"),
             "blocks_last": last.get("__blocks__")}, indent=1))
    closes = [list(closes[i:i + 3]) for i in range(0, len(closes), 3)]
    Path(out_path).write_text(json.dumps({"closes": closes, "probes": list(probes),
                                          "drains": drains, "rss": rss,
                                          "counters": c.counters, "plan": c.plan.summary(),
                                          "listener": c.supervisor.counters}))
    # the results are out: end this forked process without waiting on threads at exit (after
    # the hour's soak it spun on at 60 % of a core and held the harness for minutes)
    os._exit(0)


def _census() -> dict:
    """Objects the garbage collector tracks, by type, and Python's allocated blocks: whether a
    slow rise of RSS is Python objects piling up or memory outside them (numpy buffers, the
    allocator's fragmentation). tracemalloc cannot be used here: at 128 hosts it slowed the
    coordinator so much that it skipped 1,511 of 1,518 windows."""
    import gc
    from collections import Counter

    out = dict(Counter(type(o).__name__ for o in gc.get_objects()))
    out["__blocks__"] = sys.getallocatedblocks()
    return out


def _owners(root, depth: int = 3, min_mb: float = 1.0) -> dict:
    """Bytes held by numpy arrays (scipy's sparse matrices are made of them) reachable from
    `root`, summed by the attribute path that reaches them, cut at `depth` names: which part of
    the coordinator holds its memory. Each buffer is counted once, at the first path found
    (breadth first); Python objects count their shallow size (sys.getsizeof) under "py:"."""
    from collections import deque

    import numpy as np

    seen, bufs, sizes = set(), set(), {}
    queue = deque([(root, "c", 0)])
    while queue:
        obj, where, d = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            base = obj
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in bufs and base.flags.owndata:
                bufs.add(id(base))
                sizes[where] = sizes.get(where, 0) + base.nbytes
            continue
        py = f"py:{where}"
        sizes[py] = sizes.get(py, 0) + sys.getsizeof(obj)
        if isinstance(obj, (str, bytes, int, float, bool, type(None), type)) or callable(obj) \
                and not hasattr(obj, "__dict__"):
            continue
        if isinstance(obj, (threading.Thread, threading.Event)) or \
                type(obj).__module__.startswith(("socket", "ssl", "_thread", "logging")):
            continue
        key = (lambda k: where if d >= depth else f"{where}.{k}")
        if isinstance(obj, dict):
            items = [(f"[{k!s:.20}]" if not isinstance(k, str) else k, v) for k, v in obj.items()]
            key = (lambda k: where if d >= depth else f"{where}[]")
        elif isinstance(obj, (list, tuple, set, frozenset)):
            items = [("[]", v) for v in list(obj)[:100_000]]
            key = (lambda k: where)
        else:
            items = list(getattr(obj, "__dict__", {}).items())
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    items.append((slot, getattr(obj, slot)))
        for k, v in items:
            queue.append((v, key(k), d + 1))
    return {k: round(v / 1e6, 1) for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])
            if v >= min_mb * 1e6}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------- the agents' process
class Agents:
    """Every host's agent: registered over TCP, batches synthesized per health window."""

    def __init__(self, fabric: Fabric, key: bytes, port: int | dict[str, int], seed: int = 11):
        # the coordinator's port, or each host's (its shard's coordinator)
        self.fabric, self.key = fabric, key
        self.port_of = port if isinstance(port, dict) else {h: port for h in fabric.topo.hosts}
        self.topo = fabric.topo
        self.rng = np.random.default_rng(seed)
        self.hosts = self.topo.hosts
        self.socks: dict[str, socket.socket] = {}
        self.dropped: list[str] = []  # connections the coordinator closed
        self.templates: list[dict] = []
        self.fault_templates: list[dict] = []
        self.batch_no: dict[str, int] = {}
        n = len(self.hosts)
        self.offset = self.rng.uniform(-2e-3, 2e-3, n)
        self.drift = self.rng.uniform(-30e-6, 30e-6, n)
        self.elem_delay = self.rng.uniform(0.5e-6, 2e-6, self.topo.n_elements)
        self.elem_loss = np.full(self.topo.n_elements, BACKGROUND_LOSS)
        self.elem_extra = np.zeros(self.topo.n_elements)  # a delay fault's seconds, per element
        self.t0 = time.time()

    def register(self, host: str) -> dict:
        from fleetctl.lens.nodeagent import register

        s = socket.create_connection(("127.0.0.1", self.port_of[host]), timeout=10)
        cfg = register(s, self.key, host)
        s.settimeout(10)
        self.socks[host] = s
        self.batch_no[host] = 0
        return cfg

    def register_all(self) -> None:
        """Register every host; the flows (from the senders' configurations) and their paths."""
        from scipy.sparse import csr_matrix

        flows, fwd, rev = [], [], []
        host_ix = {h: i for i, h in enumerate(self.hosts)}
        configs = {}
        # registered agents stream from their start: health rows go out while the rest register
        # and the flows are routed (the coordinator disconnects an agent silent for 5 s)
        done = threading.Event()
        keepalive = threading.Thread(target=self._keepalive, args=(done,), daemon=True)
        keepalive.start()
        for host in self.hosts:
            for attempt in range(3000):  # the coordinator plans and traces first
                try:
                    configs[host] = self.register(host)
                    break
                except OSError:
                    time.sleep(0.2)
            else:
                raise SystemExit(f"{host}: cannot register")
        for host in self.hosts:
            cfg = configs[host]
            mine = {int(i): addr for i, addr, _dev in cfg["nodes"][host]["nics"]}
            sports, port = cfg["sports"], int(cfg["port"])
            self.rate = float(cfg["rate"]) / len(sports)  # per flow
            self.bins = int(cfg.get("summary_bins", 10))
            addr_of = dict(mine)
            for base, s, d, daddr in cfg["pairs"]:
                if int(s) not in mine:
                    continue
                addr_of[int(d)] = daddr
                for j, sp in enumerate(sports):
                    pf, _ = self.fabric.route_addr(mine[int(s)], int(sp), daddr, port)
                    pr, _ = self.fabric.route_addr(daddr, port, mine[int(s)], int(sp))
                    flows.append((int(base) + j, host_ix[host],
                                  int(self.topo.nic_host_index[int(d)])))
                    fwd.append(pf)
                    rev.append(pr)
        f = np.array(flows, dtype=np.int64)
        order = np.argsort(f[:, 1], kind="stable")  # by sender host
        self.flow, self.src_host, self.dst_host = f[order, 0], f[order, 1], f[order, 2]
        n_el = self.topo.n_elements

        def incidence(paths):
            paths = [paths[i] for i in order]
            indptr = np.cumsum([0] + [len(p) for p in paths])
            idx = np.concatenate([np.asarray(p) for p in paths])
            return csr_matrix((np.ones(idx.size), idx, indptr), shape=(len(paths), n_el))
        self.m_fwd, self.m_rev = incidence(fwd), incidence(rev)
        done.set()
        keepalive.join()
        self.base_fwd = self.m_fwd @ self.elem_delay
        self.base_rev = self.m_rev @ self.elem_delay
        self.by_dst = np.argsort(self.dst_host, kind="stable")

    def _keepalive(self, done: threading.Event, hw: float = 0.25) -> None:
        while not done.wait(hw):
            now = time.time()
            for h in list(self.socks):
                self.send(h, health_row(now - hw, hw, 2000.0), None)

    def theta(self, h: np.ndarray, t: float) -> np.ndarray:
        return self.offset[h] + self.drift[h] * (t - self.t0)

    def window(self, k: int) -> list[dict]:
        """Window k's summary (rows, loss bins, responder counts) of every host, encoded as
        the agents send them. Without a fault, one of TEMPLATES draws is reused with window k's
        times and clock offsets (drawing costs the harness ~0.5 s a window at 1,280 hosts, on
        the cores the coordinator needs); with a fault every window is drawn afresh."""
        faulty = bool((self.elem_loss != BACKGROUND_LOSS).any() or self.elem_extra.any())
        pool = self.fault_templates if faulty else self.templates
        if len(pool) < TEMPLATES:
            pool.append(self._draw())
        return self._encode(k, pool[k % len(pool)])

    def set_fault(self, cols: list[int], kind: str, on: bool) -> None:
        """The fault on (or off) its elements: a 2 % loss, or 200 us more delay."""
        if kind == "delay":
            self.elem_extra[cols] = FAULT_DELAY_S if on else 0.0
        else:
            self.elem_loss[cols] = FAULT_LOSS if on else BACKGROUND_LOSS

    def draw_ahead(self, fault_cols: list[int], kind: str = "loss") -> None:
        """The fault's windows drawn before the run, so that drawing them does not compete
        with the coordinator when the fault starts (a 1,280-host draw is ~0.5 s)."""
        self.set_fault(fault_cols, kind, True)
        self.fault_templates = [self._draw() for _ in range(TEMPLATES)]
        self.set_fault(fault_cols, kind, False)

    def _draw(self) -> dict:
        """What a window's probes give, without its time or the clocks (module docstring)."""
        rng, n_f = self.rng, self.flow.size
        keep_f = np.exp(self.m_fwd @ np.log1p(-self.elem_loss))
        keep_r = np.exp(self.m_rev @ np.log1p(-self.elem_loss))
        sent = rng.poisson(self.rate, n_f)
        lost_out = rng.binomial(sent, 1 - keep_f)
        recv = sent - lost_out
        ans = recv - rng.binomial(recv, 1 - keep_r)
        nz = np.maximum(ans, 1)
        base_fwd, base_rev = self.base_fwd, self.base_rev
        if self.elem_extra.any():
            base_fwd = base_fwd + self.m_fwd @ self.elem_extra
            base_rev = base_rev + self.m_rev @ self.elem_extra
        keep = np.flatnonzero(sent > 0)
        d = {"keep": keep, "sent": sent[keep], "ans": ans[keep], "recv": recv,
             # the answered probes' mean send time (sends spread evenly over the window) and
             # the send time of the one with the smallest forward time, in the window
             "u1": (0.5 + rng.normal(0, 0.29, n_f) / np.sqrt(nz))[keep],
             "ub": rng.uniform(0.0, 1.0, keep.size),
             "med_f": (5e-6 + base_fwd + JITTER_S * (np.log(2) + rng.normal(0, 1, n_f)
                                                          / np.sqrt(nz)))[keep],
             "med_r": (5e-6 + base_rev + JITTER_S * (np.log(2) + rng.normal(0, 1, n_f)
                                                          / np.sqrt(nz)))[keep],
             "min_f": (5e-6 + base_fwd + rng.exponential(JITTER_S / nz))[keep],
             "min_r": (5e-6 + base_rev + rng.exponential(JITTER_S / nz))[keep]}
        src = self.src_host[keep]
        d["bounds"] = bounds = np.searchsorted(src, np.arange(len(self.hosts) + 1))
        bins: dict[int, list] = {}
        for r in np.flatnonzero(d["ans"] < d["sent"]):
            h = int(src[r])
            n, lost = int(d["sent"][r]), int(d["sent"][r] - d["ans"][r])
            s_bins = rng.multinomial(n, [1 / self.bins] * self.bins)
            where = rng.choice(np.repeat(np.arange(self.bins), s_bins), lost, replace=False)
            l_bins = np.bincount(where, minlength=self.bins)
            bins.setdefault(h, []).extend([int(r - bounds[h]), *s_bins.tolist(), *l_bins.tolist()])
        d["bins"] = {h: enc(np.asarray(v, dtype="<u4")) for h, v in bins.items()}
        d["bins_n"] = {h: len(v) for h, v in bins.items()}
        got = self.by_dst[recv[self.by_dst] > 0]
        d["got"] = got
        d["got_bounds"] = np.searchsorted(self.dst_host[got], np.arange(len(self.hosts) + 1))
        return d

    def _encode(self, k: int, d: dict) -> list[dict]:
        keep = d["keep"]
        src, dst = self.src_host[keep], self.dst_host[keep]
        t1, tb = k + d["u1"], k + d["ub"]
        th_s, th_d = self.theta(src, t1), self.theta(dst, t1)
        bs, bd = self.theta(src, tb), self.theta(dst, tb)
        med_f, med_r, min_f, min_r = d["med_f"], d["med_r"], d["min_f"], d["min_r"]
        turn = 20e-6
        rows = np.zeros(keep.size, ROW_DTYPE)
        rows["window"], rows["flow"] = k, self.flow[keep]
        rows["sent"], rows["answered"] = d["sent"], d["ans"]
        got = d["ans"] > 0

        def put(name, v):
            rows[name] = np.where(got, np.rint(v * 1e9), 0).astype(np.int64)
        put("fwd", med_f + th_d - th_s)
        put("rev", med_r + th_s - th_d)
        put("t1", t1 + th_s)
        put("t4", t1 + th_s + med_f + turn + med_r)
        put("bound_t1", tb + bs)
        put("bound_fwd", min_f + bd - bs)
        put("bound_t4", tb + bs + min_f + turn + min_r)
        put("bound_rev", -(min_r + bs - bd))
        counts = np.zeros(d["got"].size, RECEIVED_ROW_DTYPE)
        counts["window"], counts["flow"], counts["count"] = k, self.flow[d["got"]], \
            d["recv"][d["got"]]
        bounds, gb = d["bounds"], d["got_bounds"]
        out = []
        for h in range(len(self.hosts)):
            mine = rows[bounds[h]:bounds[h + 1]]
            g = counts[gb[h]:gb[h + 1]]
            out.append({"window_ns": 10**9, "bins": self.bins,
                        "rows": {"n": int(mine.size), "data": enc(mine)},
                        "row_bins": {"n": d["bins_n"].get(h, 0), "data": d["bins"].get(h, EMPTY_U4)},
                        "received": {"n": int(g.size), "data": enc(g)}})
        return out

    def send(self, host: str, health: list, summary: dict | None) -> None:
        s = self.socks.get(host)
        if s is None:
            return
        k = self.batch_no[host]
        self.batch_no[host] = k + 1
        if summary is None:  # 3 of 4 batches: health only, formatted without json.dumps
            text = (f'{{"kind":"batch","v":2,"node":"{host}","batch":{k},"health":['
                    f'{json.dumps(health)}],"summary":{EMPTY_SUMMARY_TEXT}}}')
        else:
            text = json.dumps({"kind": "batch", "v": 2, "node": host, "batch": k,
                               "health": [health], "summary": summary}, separators=(",", ":"))
        pieces = [text[i:i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)]
        data = "".join(f"FLS1 {k} {i} {len(pieces)} {p}\n" for i, p in enumerate(pieces))
        try:
            s.sendall(data.encode())
        except OSError:  # the coordinator closed it: register again, as an agent does
            self.socks.pop(host, None)
            s.close()
            self.dropped.append(host)


def enc(a: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(a.tobytes(), 1)).decode()


EMPTY_U4 = enc(np.zeros(0, "<u4"))
EMPTY_SUMMARY = {"window_ns": 10**9, "bins": 10, "rows": {"n": 0, "data": enc(np.zeros(0, ROW_DTYPE))},
                 "row_bins": {"n": 0, "data": enc(np.zeros(0, "<u4"))},
                 "received": {"n": 0, "data": enc(np.zeros(0, RECEIVED_ROW_DTYPE))}}


EMPTY_SUMMARY_TEXT = json.dumps(EMPTY_SUMMARY, separators=(",", ":"))


def health_row(t_start: float, dur: float, pps: float) -> list:
    row = dict.fromkeys(HEALTH_FIELDS, 0)
    row.update(t_start_ns=int(t_start * 1e9), duration_s=dur, sent=int(pps * dur),
               late_p50_us=40.0, late_p99_us=900.0, late_max_us=2000.0, echoes=int(pps * dur),
               answered=int(pps * dur), cpu_s=0.01 * dur, wakeups=int(50 * dur),
               stall_max_us=1500.0)
    return [row[f] for f in HEALTH_FIELDS]


def drive(agents: Agents, duration: float, fault: tuple | None, restarts: int,
          hw: float | None = None):
    """Send every host's batches until `duration` has passed; the fault (cable, t_on, t_off) and
    the restarts (host drops its connection, registers again 2 s later) on the way. Returns the
    agents' own timing (the harness's CPU, not the coordinator's)."""
    hw = HEALTH_WINDOW[0] if hw is None else hw
    hosts = agents.hosts
    start = time.time()
    pps = agents.rate * 8 * 2
    restart_at = sorted(random.Random(3).uniform(10, max(11, (fault[1] if fault else duration) - 10))
                        for _ in range(restarts))
    pending_reg: list[tuple[float, str]] = []
    gen_s, send_s, late_ticks = [], [], 0
    fault_on, fault_t = False, None
    ready: dict[int, list] = {}
    dropped = 0
    tick = math.floor(time.time() / hw) * hw + hw
    while time.time() - start < duration:
        now = time.time()
        if now < tick:
            time.sleep(tick - now)
        t_rel = tick - start
        at_second = abs(tick - round(tick)) < 1e-6  # faults change with a window, as drawn
        if fault and at_second and not fault_on and fault[1] <= t_rel < fault[2]:
            agents.set_fault(fault[0], fault[3], True)
            fault_on, fault_t = True, time.time()
        elif fault and at_second and fault_on and t_rel >= fault[2]:
            agents.set_fault(fault[0], fault[3], False)
            fault_on = False
        while restart_at and t_rel >= restart_at[0]:
            restart_at.pop(0)
            h = hosts[random.randrange(len(hosts))]
            s = agents.socks.pop(h, None)
            if s:
                s.close()
                pending_reg.append((time.time() + 2.0, h))
        while agents.dropped:
            pending_reg.append((time.time() + 1.0, agents.dropped.pop()))
            dropped += 1
        for when, h in list(pending_reg):
            if time.time() >= when:
                pending_reg.remove((when, h))
                agents.register(h)
        summaries = {}
        if abs(tick - round(tick)) < 1e-6:  # window k begins: draw it meanwhile
            k_next = int(round(tick))
            gen_thread = threading.Thread(target=_draw, args=(agents, k_next, ready, gen_s), daemon=True)
            gen_thread.start()
        after = tick - 1 - hw  # window k goes with the first batch a health window after its end
        if abs(after - round(after)) < 1e-6:
            summaries = ready.pop(int(round(after)), {}) or {}
        t0 = time.perf_counter()
        for i, h in enumerate(hosts):
            agents.send(h, health_row(tick - hw, hw, pps), summaries[i] if summaries else None)
        send_s.append(time.perf_counter() - t0)
        tick += hw
        if time.time() > tick:
            late_ticks += 1
            tick = math.floor(time.time() / hw) * hw + hw
    return {"generate_s_p50": _q(gen_s, 50), "generate_s_max": _q(gen_s, 100),
            "send_s_p50": _q(send_s, 50), "send_s_max": _q(send_s, 100),
            "late_ticks": late_ticks, "dropped_by_the_coordinator": dropped,
            "fault_started": fault_t if fault else None}


def _draw(agents: Agents, k: int, ready: dict, gen_s: list) -> None:
    t0 = time.perf_counter()
    ready[k] = agents.window(k)
    for old in [x for x in ready if x < k - 2]:
        ready.pop(old, None)
    gen_s.append(time.perf_counter() - t0)


def _q(values, q):
    return round(float(np.percentile(values, q)), 3) if values else None


# ---------------------------------------------------------------- one size
def one(hosts: int, duration: float, fault_at: float, fault_for: float, restarts: int) -> dict:
    from fleetctl.config.site import parse_site
    from fleetctl.lens.register import write_key

    tmp = Path(tempfile.mkdtemp(prefix="fleetctl-harness-"))
    state = tmp / "state"
    state.mkdir()
    site = tmp / "site.toml"
    site.write_text(site_text(hosts, str(state)))
    key_path = tmp / "lens.key"
    write_key(str(key_path))
    port = 20000 + os.getpid() % 20000
    out_path = tmp / "coordinator.json"
    cluster = parse_site(site.read_text())
    fabric = Fabric(cluster)
    topo = fabric.topo
    # the cable with the fault: the first rail leaf's first uplink, both directions
    lid = next(l for l, (a, b) in topo.links.items() if a in topo.switch_tier and b in topo.switch_tier)
    a, b = topo.links[lid]
    fault_cols = [topo.link_dir(lid, a, b), topo.link_dir(lid, b, a)]
    ctx = multiprocessing.get_context("fork")
    stop_evt = ctx.Event()
    proc = ctx.Process(target=coordinator_main, args=(str(site), str(key_path), port, stop_evt,
                                                      str(out_path)))
    t_begin = time.time()
    agents, registered_s, fault, harness = _run([proc], stop_evt, fabric, key_path, port,
                                                fault_cols, fault_at, fault_for, duration, restarts)
    coord = json.loads(out_path.read_text())
    events = [json.loads(x) for x in (state / "events.jsonl").read_text().splitlines()] \
        if (state / "events.jsonl").exists() else []
    opened = [e for e in events if e.get("kind") == "open"]
    culprit = [e for e in opened if e["element"]["id"] == lid]
    others = [f"{e['element']['type']} {e['element'].get('direction') or e['element']['id']} "
              f"{e['metric']}" for e in opened if e["element"]["id"] != lid]
    closes = [s for _b, s, _c in coord["closes"]]
    cpu = [c for _b, _s, c in coord["closes"]]
    steady = [s for b, s, _c in coord["closes"] if b - t_begin > 15]  # after the first clock fits
    rss = coord["rss"]
    blocks = [[round(r[0] / 60, 1), r[2]] for r in rss[::6]] if rss and len(rss[0]) > 2 else []
    half = [r for r in rss if r[0] >= rss[-1][0] / 2] if rss else []
    slope = None
    if len(half) >= 3:
        x, y = np.array([r[0] for r in half]) / 60, np.array([r[1] for r in half])
        slope = round(float(np.polyfit(x, y, 1)[0]), 3)
    drain_total = sum(coord["drains"])
    # windows with (nearly) every host's summaries: a window whose summaries were not all in
    # when it closed is cheaper, and a p50 over both says little
    n_probes = coord.get("probes") or []
    full_at = 0.9 * max(n_probes) if n_probes else 0
    full = [(s, c) for (_b, s, c), n in zip(coord["closes"], n_probes) if n_probes and n >= full_at]
    return {
        "hosts": hosts, "nics": len(topo.nics), "plan": coord["plan"],
        "duration_s": duration, "registration_s": round(registered_s, 2),
        "windows": len(closes),
        "window_s": {"p50": _q(closes, 50), "p99": _q(closes, 99), "max": _q(closes, 100)},
        "window_cpu_s": {"p50": _q(cpu, 50), "p99": _q(cpu, 99), "max": _q(cpu, 100)},
        "windows_full": len(full),
        "window_full_s": {"p50": _q([s for s, _c in full], 50), "p99": _q([s for s, _c in full], 99),
                          "max": _q([s for s, _c in full], 100)},
        "window_full_cpu_s": {"p50": _q([c for _s, c in full], 50),
                              "p99": _q([c for _s, c in full], 99)},
        "window_probes": {"p10": _q(n_probes, 10), "p50": _q(n_probes, 50), "max": max(n_probes)}
        if n_probes else None,
        "window_s_after_15s": {"p50": _q(steady, 50), "p99": _q(steady, 99), "max": _q(steady, 100)},
        "ingest_cpu_s_per_s": round(drain_total / max(1.0, duration), 3),
        "rss_mb": {"first": rss[0][1] if rss else None, "last": rss[-1][1] if rss else None,
                   "max": max(r[1] for r in rss) if rss else None,
                   "slope_mb_per_min_second_half": slope,
                   "slope_mb_per_min_last_quarter": _slope([r for r in rss if r[0] >= rss[-1][0] * 0.75])
                   if rss else None,
                   "per_minute": [[round(r[0] / 60, 1), r[1]] for r in rss[::6]],
                   "python_blocks_per_minute": blocks},
        "counters": {k: v for k, v in coord["counters"].items()},
        "listener": coord["listener"],
        "fault": {"cable": lid, "at_s": fault_at, "for_s": fault_for} if fault else None,
        "time_to_culprit_s": round(min(_epoch(e) for e in culprit) - harness["fault_started"], 2)
        if culprit and harness["fault_started"] else None,
        "culprit_events": len(culprit),
        "other_events": others,
        "harness": harness, "state_dir": str(state),
        "pinned": {k: sorted(v) for k, v in PIN.items()} or None,
        "health_window_s": HEALTH_WINDOW[0]}


def _run(procs: list, stop_evt, fabric: Fabric, key_path, port, fault_cols: list[int],
         fault_at: float, fault_for: float, duration: float, restarts: int, kind: str = "loss"):
    """Start the coordinators' processes, register every agent (`port`: one, or each host's),
    drive the run, stop. Returns (agents, registration seconds, the fault, the harness's timing)."""
    from fleetctl.lens.register import read_key

    for p in procs:
        p.start()
    if PIN:
        os.sched_setaffinity(0, PIN["agents"])
    agents = Agents(fabric, read_key(str(key_path)), port)
    t_reg = time.time()
    agents.register_all()
    registered_s = time.time() - t_reg
    fault = (fault_cols, fault_at, fault_at + fault_for, kind) if fault_at > 0 else None
    if fault:
        agents.draw_ahead(fault_cols, kind)
    harness = drive(agents, duration, fault, restarts)
    _stop(procs, stop_evt, agents)
    return agents, registered_s, fault, harness


def _stop(procs: list, stop_evt, agents: Agents) -> None:
    """Stop the coordinators (and the merge) and close the agents' connections."""
    stop_evt.set()
    for p in procs:
        p.join(120)
        if p.is_alive():  # its results are written; a thread that outlives run() must not hang us
            p.kill()
            p.join(10)
    for s in agents.socks.values():
        s.close()


# ---------------------------------------------------------------- shards
def merge_main(site_path: str, dirs: list[str], merge_dir: str, stop_evt) -> None:
    """`lens merge` (the service) in its own process, over the shards' state directories."""
    from fleetctl.config import load_site
    from fleetctl.lens.shard import merge_forever

    Path(merge_dir).mkdir(parents=True, exist_ok=True)
    log_file = open(Path(merge_dir) / "merge.log", "a")
    stop = threading.Event()
    threading.Thread(target=lambda: (stop_evt.wait(), stop.set()), daemon=True).start()
    merge_forever(load_site(site_path), dirs, None, 5.0, merge_dir, 1.0, stop,
                  lambda m: (log_file.write(f"{time.strftime('%H:%M:%S')} {m}\n"), log_file.flush()))
    os._exit(0)


def sharded(hosts: int, n_shards: int, duration: float, fault_at: float, fault_for: float,
            restarts: int, kind: str = "loss") -> dict:
    """The site in `n_shards` shards: a real coordinator per shard (its own process, port and
    state), `lens merge` in another, every host's agent registered with its shard's coordinator;
    the fault, on one spine (shared by every shard): a 2 % loss on every link of it (`kind`
    loss), or every path through it 200 us slower (delay: the switch itself, once a path)."""
    from fleetctl.analysis.shards import partition
    from fleetctl.config.site import parse_site
    from fleetctl.lens.register import write_key

    tmp = Path(tempfile.mkdtemp(prefix="fleetctl-harness-shards-"))
    state = tmp / "state"
    state.mkdir()
    max_hosts = math.ceil(hosts / n_shards)
    site = tmp / "site.toml"
    site.write_text(site_text(hosts, str(state), max_hosts, sus=n_shards))  # a unit a shard
    key_path = tmp / "lens.key"
    write_key(str(key_path))
    cluster = parse_site(site.read_text())
    fabric = Fabric(cluster)
    topo = fabric.topo
    layout = partition(topo, max_hosts)
    spine = layout.shared[0]
    fault_cols = [c for lid, (a, b) in topo.links.items() if spine in (a, b)
                  for c in (topo.link_dir(lid, a, b), topo.link_dir(lid, b, a))]
    if kind == "delay":
        fault_cols = [topo.index("switch", spine)]
    ctx = multiprocessing.get_context("fork")
    stop_evt = ctx.Event()
    base = 20000 + os.getpid() % 15000
    procs, port_of, dirs, outs = [], {}, [], []
    for i, shard in enumerate(layout.shards):
        d, out = state / shard.name, tmp / f"{shard.name}.json"
        dirs.append(str(d))
        outs.append(out)
        procs.append(ctx.Process(target=coordinator_main, args=(
            str(site), str(key_path), base + i, stop_evt, str(out), list(shard.hosts), str(d))))
        port_of.update({h: base + i for h in shard.hosts})
    merge_dir = tmp / "merge"
    procs.append(ctx.Process(target=merge_main, args=(str(site), dirs, str(merge_dir), stop_evt)))
    t_begin = time.time()
    agents, registered_s, fault, harness = _run(procs, stop_evt, fabric, key_path, port_of,
                                                fault_cols, fault_at, fault_for, duration, restarts, kind)

    def opened(path: Path) -> list[dict]:
        if not path.exists():
            return []
        return [e for e in (json.loads(x) for x in path.read_text().splitlines())
                if e.get("kind") == "open"]

    def label(e: dict) -> str:
        return f"{e['element']['type']} {e['element'].get('direction') or e['element']['id']} {e['metric']}"
    shards = []
    for shard, d, out in zip(layout.shards, dirs, outs):
        coord = json.loads(out.read_text())
        closes = [x for _b, x, _c in coord["closes"]]
        cpu = [c for _b, _x, c in coord["closes"]]
        shards.append({"shard": shard.name, "hosts": len(shard.hosts),
                       "paths": coord["plan"].get("paths"), "windows": len(closes),
                       "window_s": {"p50": _q(closes, 50), "p99": _q(closes, 99)},
                       "window_cpu_s": {"p50": _q(cpu, 50), "p99": _q(cpu, 99)},
                       "windows_skipped": coord["counters"].get("windows_skipped", 0),
                       "rss_mb_last": coord["rss"][-1][1] if coord["rss"] else None,
                       "own_events": sorted({label(e) for e in opened(Path(d) / "events.jsonl")})})
    merged = opened(merge_dir / "events.jsonl")
    culprit = [e for e in merged if e["element"]["id"] == spine]
    status = json.loads((merge_dir / "merge-status.json").read_text()) \
        if (merge_dir / "merge-status.json").exists() else {}
    return {"hosts": hosts, "shards": len(layout.shards), "shard_hosts": max_hosts,
            "shared_switches": len(layout.shared), "duration_s": duration,
            "registration_s": round(registered_s, 2), "per_shard": shards,
            "fault": {"spine": spine, "kind": kind, "elements": len(fault_cols), "at_s": fault_at,
                      "for_s": fault_for, **({"delay_us": round(FAULT_DELAY_S * 1e6)}
                                             if kind == "delay" else {"loss": FAULT_LOSS})}
            if fault else None,
            "merge_time_to_culprit_s": round(min(_epoch(e) for e in culprit) - harness["fault_started"], 2)
            if culprit and harness["fault_started"] else None,
            "merge_culprit_events": len(culprit),
            "merge_other_events": [label(e) for e in merged if e["element"]["id"] != spine],
            "merge_last": {k: status.get(k) for k in ("shards_used", "shards_missing", "unreadable")},
            "harness": harness, "state_dir": str(state), "began": t_begin}


def _slope(samples: list) -> float | None:
    """RSS slope (MB a minute) of (seconds, MB) samples; None under 3 samples."""
    if len(samples) < 3:
        return None
    x, y = np.array([r[0] for r in samples]) / 60, np.array([r[1] for r in samples])
    return round(float(np.polyfit(x, y, 1)[0]), 3)


def _epoch(event: dict) -> float:
    from datetime import datetime

    stamp = event["time"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="128,512,1280")
    ap.add_argument("--duration", type=float, default=90.0)
    ap.add_argument("--fault-at", type=float, default=45.0, help="0: no fault (a clean soak)")
    ap.add_argument("--fault-for", type=float, default=20.0)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--shards", type=int, default=1,
                    help="run the site as this many lens shards and `lens merge` (the fault: "
                         "every link of one spine)")
    ap.add_argument("--fault-kind", choices=["loss", "delay"], default="loss",
                    help="with --shards: a 2 %% loss on every link of the spine, or every path "
                         "through it 200 us slower")
    ap.add_argument("--health-window", type=float, default=0.25,
                    help="lens.health_window_s: how often each agent sends a batch (s); "
                         "a multiple of 0.25 that divides 1 or a whole number")
    ap.add_argument("--pin", action="store_true",
                    help="the coordinator on CPU 0 alone, the agents' process on the others")
    args = ap.parse_args()
    HEALTH_WINDOW[0] = args.health_window
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("--pin needs 2 CPUs or more")
        PIN.update(coordinator={cpus[0]}, agents=set(cpus[1:]))
    if args.shards > 1:
        for n in (int(x) for x in args.hosts.split(",")):
            print(json.dumps(sharded(n, args.shards, args.duration, args.fault_at, args.fault_for,
                                     args.restarts, args.fault_kind)), flush=True)
        return
    for n in (int(x) for x in args.hosts.split(",")):
        print(json.dumps(one(n, args.duration, args.fault_at, args.fault_for, args.restarts)),
              flush=True)


if __name__ == "__main__":
    main()
