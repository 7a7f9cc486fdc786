"""lens in shards: each shard's coordinator publishes a per-window document; `lens merge` joins
them (the layout and the merge's rules: analysis/shards.py; docs/lens.md, "Shards").

The protocol is a file: a shard's coordinator replaces `<state_dir>/shard-window.json` (atomic
rename) after every window, and the merge reads the newest one of each shard, locally or from
a shared or synced directory. One document (version 1):

    {"version": 1, "shard": "shard-3", "t_end": 1796000000.0, "window_s": 1.0,
     "probes": 512000.0, "lost": 51.0,                  # valid probes and lost, net (below)
     "switches": {"spine7": [31900.0, 4.0], ...},       # per shared switch: probes through, lost
     "paths": 9800.0, "delayed": 12.0,                  # valid paths for delay, delayed, net
     "delay_switches": {"spine7": [610.0, 3.0, 41.5]},  # paths through, delayed, excess us (sum)
     "findings": [ {...finding as lens reports it...} ]}

Probes and losses are net of the paths the window's own loss findings cross; paths for delay net
of those any of its findings cross, and of lossy paths. The delay fields are optional (a document
without them, from before 2026-12-05, adds nothing to the pooled delay test). A document is
hostile input to the merge: bounded in size, every number finite and in range, every element
one of the site's, every switch one the layout says is shared.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fleetctl.analysis.shards import MergeResult, ShardLayout, ShardWindow, merge_windows, \
    partition, shard_counts
from fleetctl.atomic import write_atomic
from fleetctl.errors import ConfigError, DataError
from fleetctl.filekit.read import read_json
from fleetctl.lens.jobs import FabricJobs, JobRefresh, element_columns
from fleetctl.lens.window import MIN_JUDGED_SHARE
from fleetctl.model.fabric import Topology
from fleetctl.model.severity import SEVERITY_RANK

SHARD_FILE = "shard-window.json"
VERSION = 1
MAX_DOC_BYTES = 4 << 20
SUSPECT_WINDOWS = 6  # windows a suspected shared switch stays so (events.EventRules.k_open_suspect)
MAX_FINDINGS = 500
MAX_COUNT = 1e13  # probes in one window of one shard, far above any plan
METRICS = ("loss", "delay", "down")


def layout_for(topo: Topology, max_hosts: int) -> ShardLayout:
    return partition(topo, int(max_hosts))


class ShardPublisher:
    """A shard's coordinator's side: which shard its nodes are, the shared switches above them
    (their incidence columns), and the document of each window."""

    def __init__(self, layout: ShardLayout, topo: Topology, hosts: list[str], state_dir: Path):
        counts: dict[str, int] = {}
        mine = set(hosts)
        for s in layout.shards:
            counts[s.name] = len(mine & set(s.hosts))
        self.name = max(counts, key=lambda n: (counts[n], n)) if counts else "shard-0"
        self.foreign = sorted(mine - set(layout.shard_of(self.name).hosts))
        self.shared = layout.shared_for(hosts)
        self.cols = np.array([topo.index("switch", s) for s in self.shared], dtype=np.int64)
        self.topo = topo
        self.path = Path(state_dir) / SHARD_FILE

    def counts(self, step, sig, findings: list[dict]) -> dict:
        return shard_counts(step, sig, findings, self.cols,
                            lambda el: element_columns(self.topo, el))

    def document(self, t_end: float, window_s: float, counts: dict | None,
                 findings: list[dict]) -> dict:
        switches, delay = {}, {}
        if counts is not None:
            for sw, n, k in zip(self.shared, counts["through"].tolist(),
                                counts["lost_through"].tolist()):
                if n > 0:
                    switches[sw] = [round(n, 3), round(k, 3)]
            for sw, n, k, x in zip(self.shared, counts["paths_through"].tolist(),
                                   counts["delayed_through"].tolist(),
                                   counts["excess_through"].tolist()):
                if n > 0:
                    delay[sw] = [round(n, 3), round(k, 3), round(x, 1)]
        return {"version": VERSION, "shard": self.name, "t_end": t_end, "window_s": window_s,
                "probes": round(counts["probes"], 3) if counts else 0.0,
                "lost": round(counts["lost"], 3) if counts else 0.0,
                "switches": switches,
                "paths": round(counts["paths"], 3) if counts else 0.0,
                "delayed": round(counts["delayed"], 3) if counts else 0.0,
                "delay_switches": delay, "findings": findings[:MAX_FINDINGS]}

    def publish(self, doc: dict) -> None:
        write_atomic(self.path, json.dumps(doc, separators=(",", ":"), default=_plain).encode())


def _family(metric: str) -> str:
    """Loss and down are one fault family (a switch suspected of either), delay another."""
    return "delay" if metric == "delay" else "loss"


def _plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (set, tuple)):
        return list(v)
    return str(v)


# ---------------------------------------------------------------------- reading documents
def _count(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or not 0 <= v <= MAX_COUNT:
        raise DataError(f"{what}: {str(v)[:40]!r} is not a count")
    return float(v)


def _element(topo: Topology, el, what: str) -> dict:
    if not isinstance(el, dict):
        raise DataError(f"{what}: element is not an object")
    t, i, d = el.get("type"), el.get("id"), el.get("direction", "")
    if not isinstance(i, str) or not isinstance(d, str) or len(i) > 512 or len(d) > 1024:
        raise DataError(f"{what}: element id or direction is not short text")
    known = {"switch": lambda: i in topo.switch_tier, "nic": lambda: i in set(topo.nics),
             "host": lambda: i in set(topo.hosts), "link": lambda: i in topo.links}
    if t not in known or not known[t]():
        raise DataError(f"{what}: {str(t)[:20]} {i[:80]!r} is not in the site's fabric")
    out = {"type": t, "id": i}
    if t == "link":
        a, b = topo.links[i]
        if d not in (f"{a}->{b}", f"{b}->{a}", "both"):
            raise DataError(f"{what}: link {i[:80]!r} has no direction {d[:80]!r}")
        out["direction"] = d
    return out


def _finding(topo: Topology, f, what: str) -> dict:
    if not isinstance(f, dict):
        raise DataError(f"{what}: not an object")
    metric, sev, conf = f.get("metric"), f.get("severity"), f.get("confidence")
    if metric not in METRICS or sev not in SEVERITY_RANK:
        raise DataError(f"{what}: metric or severity unknown")
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0 <= conf <= 1:
        raise DataError(f"{what}: confidence not within 0..1")
    ev = f.get("evidence", {})
    if not isinstance(ev, dict):
        raise DataError(f"{what}: evidence is not an object")
    return {"element": _element(topo, f.get("element"), what), "metric": metric, "severity": sev,
            "confidence": float(conf), "evidence": ev}


def parse_document(doc, topo: Topology, layout: ShardLayout, what: str) -> ShardWindow:
    """A shard's document, checked field by field (DataError naming what is wrong)."""
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise DataError(f"{what}: not a version {VERSION} shard document")
    shard = doc.get("shard")
    if not isinstance(shard, str) or shard not in {s.name for s in layout.shards}:
        raise DataError(f"{what}: shard {str(shard)[:40]!r} is not one of this site's shards")
    t_end = doc.get("t_end")
    if isinstance(t_end, bool) or not isinstance(t_end, (int, float)) or not 0 < t_end < 1e10:
        raise DataError(f"{what}: t_end is not a time")
    switches = doc.get("switches")
    findings = doc.get("findings")
    if not isinstance(switches, dict) or not isinstance(findings, list) or \
            len(findings) > MAX_FINDINGS:
        raise DataError(f"{what}: switches or findings malformed (at most {MAX_FINDINGS} findings)")
    shared = set(layout.shared)
    sw: dict[str, tuple[float, float]] = {}
    for name, v in switches.items():
        if name not in shared or not isinstance(v, list) or len(v) != 2:
            raise DataError(f"{what}: switch {name[:80]!r} is not a shared switch with [probes, lost]")
        n, k = _count(v[0], f"{what}: {name} probes"), _count(v[1], f"{what}: {name} lost")
        if k > n:
            raise DataError(f"{what}: {name} lost more probes than went through it")
        sw[name] = (n, k)
    probes, lost = _count(doc.get("probes"), f"{what}: probes"), _count(doc.get("lost"), f"{what}: lost")
    if lost > probes:
        raise DataError(f"{what}: lost more probes than it counted")
    found = [_finding(topo, f, f"{what}: finding {i}") for i, f in enumerate(findings)]
    paths, delayed, dsw = _delay_figures(doc, shared, what)
    return ShardWindow(shard, float(t_end), probes, lost, sw, found, paths, delayed, dsw)


def _delay_figures(doc: dict, shared: set[str], what: str):
    """The optional delay fields: (paths, delayed, per shared switch (paths, delayed, excess))."""
    if "delay_switches" not in doc and "paths" not in doc:
        return 0.0, 0.0, {}
    table = doc.get("delay_switches")
    if not isinstance(table, dict):
        raise DataError(f"{what}: delay_switches is not an object")
    paths, delayed = _count(doc.get("paths"), f"{what}: paths"), _count(doc.get("delayed"), f"{what}: delayed")
    if delayed > paths:
        raise DataError(f"{what}: more paths delayed than it counted")
    out: dict[str, tuple[float, float, float]] = {}
    for name, v in table.items():
        if name not in shared or not isinstance(v, list) or len(v) != 3:
            raise DataError(f"{what}: delay switch {name[:80]!r} is not a shared switch with "
                            "[paths, delayed, excess_us]")
        n, k = _count(v[0], f"{what}: {name} paths"), _count(v[1], f"{what}: {name} delayed")
        x = _count(v[2], f"{what}: {name} excess_us")
        if k > n:
            raise DataError(f"{what}: {name} has more paths delayed than through it")
        out[name] = (n, k, x)
    return paths, delayed, out


# ---------------------------------------------------------------------- the merge
@dataclass
class MergeSource:
    directory: Path
    last_error: str = ""


class ShardMerge:
    """Reads the shards' documents and merges them; `window` once per window."""

    def __init__(self, topo: Topology, layout: ShardLayout, directories: list[str],
                 stale_s: float = 5.0, th=None):
        if not directories:
            raise ConfigError("lens merge needs the shards' state directories (--from)")
        self.topo, self.layout, self.stale_s, self.th = topo, layout, stale_s, th
        self.sources = [MergeSource(Path(d)) for d in directories]
        self._links: dict[str, list[str]] = {}
        for lid, (a, b) in topo.links.items():
            for end in (a, b):
                if end in topo.switch_tier:
                    self._links.setdefault(end, []).append(lid)
        self.unreadable = 0
        shared = set(layout.shared)
        self._switches_of_link: dict[str, list[str]] = {}
        for sw, lids in self._links.items():
            if sw in shared:
                for lid in lids:
                    self._switches_of_link.setdefault(lid, []).append(sw)
        self._tick = 0
        # (shared switch, "loss" or "delay") -> the last window it was suspected so
        self._suspected: dict[tuple[str, str], int] = {}

    def read(self, now: float) -> tuple[list[ShardWindow], dict[str, str]]:
        """The fresh windows, and why each source gave none (its path -> reason)."""
        windows, why = {}, {}
        for src in self.sources:
            path = src.directory / SHARD_FILE
            try:
                doc = read_json(path, "shard document", max_bytes=MAX_DOC_BYTES, missing_ok=True)
                if doc is None:
                    why[str(path)] = "no document yet"
                    continue
                w = parse_document(doc, self.topo, self.layout, str(path))
            except DataError as exc:
                self.unreadable += 1
                why[str(path)] = str(exc)[:300]
                continue
            if now - w.t_end > self.stale_s:
                why[str(path)] = f"stale: its last window ended {now - w.t_end:.1f} s ago"
                continue
            have = windows.get(w.shard)
            if have is None or w.t_end > have.t_end:
                windows[w.shard] = w
        return list(windows.values()), why

    def window(self, now: float) -> tuple[MergeResult, dict[str, str]]:
        windows, why = self.read(now)
        result = merge_windows(windows, [s.name for s in self.layout.shards], self.layout.shared,
                               self.th, links_of=self.links_of)
        self._keep_suspects(result.findings)
        return result, why

    def _keep_suspects(self, findings: list[dict]) -> None:
        """A switch suspected in one of the last SUSPECT_WINDOWS windows stays suspected: a
        window that names only one of its links (the shards' findings come and go while a
        spine's fault is being named) marks that link too, rather than opening it at once."""
        self._tick += 1
        for f in findings:
            sw = f["evidence"].get("suspect_switch")
            if sw:
                self._suspected[(sw, _family(f["metric"]))] = self._tick
        self._suspected = {key: t for key, t in self._suspected.items()
                           if self._tick - t < SUSPECT_WINDOWS}
        for f in findings:
            el = f["element"]
            if el["type"] != "link":
                continue
            for sw in self._switches_of_link.get(el["id"], ()):
                if (sw, _family(f["metric"])) in self._suspected:
                    f["evidence"].setdefault("suspect_switch", sw)

    def links_of(self, switch: str) -> list[str]:
        return self._links.get(switch, [])

    def unjudged(self, keys, missing: list[str]) -> set[str]:
        """Of the merged event machine's places (`keys`), those a window with the shards
        `missing` cannot call good: where under MIN_JUDGED_SHARE of the shards whose probes
        cross the place are in (a shared switch: the shards below it; a link: those below its
        lower end). Places of no switch: all held. As lens's window.unjudged: one late shard
        must not hold every merged event open."""
        keys = set(keys)
        if not missing:
            return set()
        names = set(missing)
        gone = {i for i, sh in enumerate(self.layout.shards) if sh.name in names}
        out = set()
        for key in keys:
            crossing = self._shards_at(key)
            if not crossing or len(crossing - gone) < MIN_JUDGED_SHARE * len(crossing):
                out.add(key)
        return out

    def _shards_at(self, key: str) -> frozenset[int]:
        kind, _, ident = key.partition(":")
        below = self.layout.below
        if kind == "switch":
            return below.get(ident, frozenset())
        if kind == "link" and ident in self.topo.links:
            ends = [e for e in self.topo.links[ident] if e in below]
            if ends:
                return below[min(ends, key=lambda e: self.topo.switch_tier[e])]
        return frozenset()


def mark_explained(findings: list[dict], open_events: list[dict], links_of) -> None:
    """A link finding on a switch with an open merged event is that event's fault seen partly
    (a window where a shard was missing or saw too little to name the switch): marked
    `explained_by_open_event`, so it opens an event of its own only if it persists
    (`lens.k_open_gray` windows, events.py), as lens does for a coordinator's findings."""
    switches = {ev["element"]["id"] for ev in open_events if ev["element"].get("type") == "switch"}
    if not switches:
        return
    switch_of = {lid: sw for sw in sorted(switches) for lid in links_of(sw)}
    for f in findings:
        if f["element"]["type"] == "link" and f["element"]["id"] in switch_of:
            # the switch's place, named: the tracker does not judge it good this window
            f["evidence"]["explained_by_open_event"] = f"switch:{switch_of[f['element']['id']]}"


def run_merge(merge: ShardMerge, tracker, outputs, window_s: float, stop, log=print,
              status_path: Path | None = None, refresh_jobs=lambda: None) -> None:
    """The merge's loop: every window, the shards' newest documents -> merged findings -> the
    event machine (lens's own) -> the merged event log. A window with shards missing closes
    nothing that mostly they cross (what a missing shard sees is unknown): `ShardMerge.unjudged`."""
    next_t = time.time() + window_s
    while not stop.wait(max(0.0, next_t - time.time())):
        refresh_jobs()
        now = time.time()
        result, why = merge.window(now)
        mark_explained(result.findings, tracker.open_events(), merge.links_of)
        silent = merge.unjudged(tracker.loc, result.shards_missing)
        for rec in tracker.window(now - window_s, now, result.findings, silent):
            outputs.event(rec)
        if status_path is not None:
            write_atomic(status_path, json.dumps({
                "t": now, "shards_used": result.shards_used, "shards_missing": result.shards_missing,
                "why_missing": why, "findings": result.findings, "switches": result.switches,
                "open_events": tracker.open_events(), "unreadable": merge.unreadable},
                default=_plain).encode())
        next_t += window_s
        if next_t < time.time():
            log(f"merge: behind by {time.time() - next_t:.1f} s, skipping ahead")
            next_t = time.time() + window_s


# ---------------------------------------------------------------------- commands' work
def site_layout(cluster, max_hosts: int | None) -> tuple[Topology, ShardLayout]:
    """The site's topology and its shards (`max_hosts`, else lens.shard_max_hosts)."""
    from fleetctl.lens.options import LensOptions

    n = int(max_hosts if max_hosts is not None else LensOptions.from_site(cluster).shard_max_hosts)
    if n <= 0:
        raise ConfigError("no shard size: set lens.shard_max_hosts in the site file or give "
                          "--max-hosts")
    topo = Topology.from_site(cluster)
    return topo, layout_for(topo, n)


def _job_refresh(cluster, jobs: FabricJobs, every_s: float, log):
    """The merged events list the jobs on both sides of their element, as a coordinator's do
    (none where this host has no squeue)."""
    slurm = None
    if shutil.which("squeue"):
        from fleetctl.slurm import backend_for_site

        slurm = backend_for_site(cluster)
    refresh = JobRefresh(slurm, every_s, log, "merge: ")
    return lambda: refresh(jobs)


def merge_exit_code(result: MergeResult) -> int:
    """0: every shard in and nothing found; 1: a shard missing, or a finding below critical;
    2: a critical finding (as `lens status`)."""
    if any(f["severity"] == "critical" for f in result.findings):
        return 2
    return 1 if result.findings or result.shards_missing else 0


def merge_once(cluster, directories: list[str], max_hosts: int | None, stale_s: float) -> dict:
    topo, layout = site_layout(cluster, max_hosts)
    merge = ShardMerge(topo, layout, directories, stale_s)
    result, why = merge.window(time.time())
    return {"shards_used": result.shards_used, "shards_missing": result.shards_missing,
            "why_missing": why, "findings": result.findings, "switches": result.switches,
            "exit_code": merge_exit_code(result)}


def merge_forever(cluster, directories: list[str], max_hosts: int | None, stale_s: float,
                  state_dir: str, window_s: float, stop, log) -> None:
    """`lens merge` as a service: the merged events in `state_dir/events.jsonl` (read them with
    `lens events --state-dir`), its status in `state_dir/merge-status.json`."""
    from fleetctl.lens.events import EventRules, EventTracker
    from fleetctl.lens.options import LensOptions
    from fleetctl.lens.outputs import Outputs

    topo, layout = site_layout(cluster, max_hosts)
    merge = ShardMerge(topo, layout, directories, stale_s)
    opts = LensOptions.from_site(cluster)
    opts.state_dir, opts.metrics_port, opts.segments = state_dir, 0, False
    Path(state_dir).expanduser().mkdir(parents=True, exist_ok=True)
    outputs = Outputs(opts, log, topo=topo, cluster=cluster)
    rules = EventRules(k_open=opts.k_open, k_open_down=opts.k_open_down,
                       k_open_gray=opts.k_open_gray, m_close=opts.m_close,
                       flap_count=opts.flap_count, flap_window_s=opts.flap_window_s)
    jobs = FabricJobs(topo)
    tracker = EventTracker(rules, topo.location, jobs.affected)
    tracker.adopt(outputs.open_events())
    log(f"merge: {len(layout.shards)} shards, {len(layout.shared)} shared switches, "
        f"reading {len(directories)} directories every {window_s:g} s")
    try:
        run_merge(merge, tracker, outputs, window_s, stop, log, opts.path("merge-status.json"),
                  _job_refresh(cluster, jobs, opts.jobs_refresh_s, log))
    finally:
        outputs.close()
