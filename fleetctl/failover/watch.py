"""`fleetctl failover watch`: link and port events, the fleet plugin's counters, flap history.

Sources: rtnetlink for netdevs (events as they happen, plus a re-dump every interval so a lost
event is caught), /sys/class/infiniband/*/ports/*/state for IB and RoCE ports (polled every
interval), and the counters files of processes running the fleet plugin. Every change is a record
(a dict, printed as one JSON line by the CLI); `prometheus()` renders the current state for
node_exporter's textfile collector.

Flap history per link: the down transitions seen within the flap window (default 24 h, after
DOMAIN.md's "more than 2 carrier changes a day is flapping"), their count and mean period.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.failover import counters as counters_mod
from fleetctl.failover import netlink, sysfs

FLAP_WINDOW_S = 86_400.0
FLAP_COUNT = 3  # down transitions within the window that make a link "flapping"
MAX_LINKS = 4096
MAX_HISTORY = 10_000


@dataclass
class LinkHistory:
    name: str
    kind: str  # netdev | ib_port
    up: bool | None = None
    since: float = 0.0  # wall time of the last change this watch saw (0: state at start)
    downs: deque = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))  # monotonic times
    carrier_changes: int | None = None
    operstate: str = ""
    admin_up: bool | None = None  # netdevs: IFF_UP (an interface set down on purpose is no problem)

    def prune(self, now: float, window: float) -> None:
        while self.downs and now - self.downs[0] > window:
            self.downs.popleft()

    @property
    def period_s(self) -> float | None:
        if len(self.downs) < 2:
            return None
        return round((self.downs[-1] - self.downs[0]) / (len(self.downs) - 1), 3)

    def record(self, event: str, flap_count: int) -> dict:
        return {"ts": round(time.time(), 3), "event": event, "link": self.name, "kind": self.kind, "up": self.up,
                "operstate": self.operstate, "downs": len(self.downs), "period_s": self.period_s,
                "flapping": len(self.downs) >= flap_count, "carrier_changes": self.carrier_changes}


class Watch:
    def __init__(self, *, links: set[str] | None = None, counters_dir: str = counters_mod.DEFAULT_DIR,
                 sysfs_root: str = "/sys", interval: float = 1.0, flap_window: float = FLAP_WINDOW_S,
                 flap_count: int = FLAP_COUNT, use_netlink: bool = True):
        self.only = links
        self.counters_dir = counters_dir
        self.sysfs_root = sysfs_root
        self.interval = interval
        self.flap_window = flap_window
        self.flap_count = flap_count
        self.use_netlink = use_netlink
        self.links: dict[str, LinkHistory] = {}
        self.counters: dict[int, counters_mod.Counters] = {}
        self.damaged_seen: set[str] = set()
        self.damaged_why: dict[str, str] = {}
        self.refused_why: dict[str, str] = {}  # files and directories not their process owner's
        self.present: set[str] = set()  # netdevs and IB devices/ports seen, for --nic names that match none
        self.monitor: netlink.LinkMonitor | None = None
        self.next_tick = 0.0

    # ---- life
    def start(self) -> list[dict]:
        """The state at start: one record per link, port and counters file."""
        if self.use_netlink:
            self.monitor = netlink.LinkMonitor()  # subscribe before the dump: no change falls between
        out = self._netdevs(netlink.dump() if self.use_netlink else [], initial=True)
        out += self._ib_ports(initial=True)
        out += self._counters(initial=True)
        self.next_tick = time.monotonic() + self.interval
        return out

    def close(self) -> None:
        if self.monitor:
            self.monitor.close()
            self.monitor = None

    def poll(self, timeout: float) -> list[dict]:
        """Records of what changed within `timeout` seconds."""
        end = time.monotonic() + timeout
        out: list[dict] = []
        while True:
            now = time.monotonic()
            wait = max(0.0, min(end, self.next_tick) - now)
            if self.monitor:
                out += self._netdevs(self.monitor.read(wait))
            else:
                time.sleep(wait)
            now = time.monotonic()
            if now >= self.next_tick:
                self.next_tick = now + self.interval
                if self.use_netlink:
                    out += self._netdevs(netlink.dump())
                out += self._ib_ports()
                out += self._counters()
            if now >= end:
                return out

    def follow(self, on_records: Callable[[list[dict]], None], stop, duration: float = 0.0,
               prom_file: str | None = None) -> None:
        """Records to `on_records` as they come until `stop` (an Event) is set or `duration` seconds
        have passed (0: no end); `prom_file` is rewritten every interval."""
        end = time.monotonic() + duration if duration else None
        while not stop.is_set() and (end is None or time.monotonic() < end):
            step = self.interval if end is None else max(0.0, min(self.interval, end - time.monotonic()))
            on_records(self.poll(step))
            if prom_file:
                self.write_prometheus(prom_file)

    # ---- sources
    def _wanted(self, name: str) -> bool:
        return self.only is None or name in self.only

    def _change(self, key: str, kind: str, up: bool, initial: bool, **extra) -> dict | None:
        hist = self.links.get(key)
        if hist is None:
            if len(self.links) >= MAX_LINKS:
                return None
            hist = self.links[key] = LinkHistory(key, kind)
        now = time.monotonic()
        for name, value in extra.items():
            setattr(hist, name, value)
        hist.prune(now, self.flap_window)
        if hist.up is None or initial:
            hist.up = up
            return hist.record("link_state", self.flap_count)
        if hist.up == up:
            return None
        hist.up, hist.since = up, time.time()
        if not up:
            hist.downs.append(now)
        return hist.record("link_up" if up else "link_down", self.flap_count)

    def _netdevs(self, states: list[netlink.LinkState], initial: bool = False) -> list[dict]:
        out = []
        for st in states:
            if st.loopback or not self._wanted(st.name):
                continue
            if st.deleted:
                self.links.pop(st.name, None)
                self.present.discard(st.name)
                out.append({"ts": round(time.time(), 3), "event": "link_gone", "link": st.name, "kind": "netdev"})
                continue
            self.present.add(st.name)
            rec = self._change(st.name, "netdev", st.up, initial, operstate=st.operstate,
                               carrier_changes=st.carrier_changes, admin_up=st.admin_up)
            if rec:
                out.append(rec)
        return out

    def _ib_ports(self, initial: bool = False) -> list[dict]:
        out = []
        for port in sysfs.ib_ports(self.sysfs_root):
            if not (self._wanted(port.device) or self._wanted(port.name)):
                continue
            self.present.update((port.device, port.name))
            rec = self._change(port.name, "ib_port", port.up, initial, operstate=port.state)
            if rec:
                out.append(rec)
        return out

    def _counters(self, initial: bool = False) -> list[dict]:
        scan = counters_mod.scan(self.counters_dir)
        out = []
        ts = round(time.time(), 3)
        current = {c.pid: c for c in scan.files}
        for pid, c in current.items():
            old = self.counters.get(pid)
            if old and old.updated == c.updated and old.alive == c.alive:
                continue
            delta = {k: v - old.values.get(k, 0) for k, v in c.values.items()
                     if old and v != old.values.get(k)} if old else {}
            out.append({"ts": ts, "event": "counters", **c.to_dict(), "changed": delta, "initial": initial})
        for pid in set(self.counters) - set(current):
            out.append({"ts": ts, "event": "counters_gone", "pid": pid})
        self.counters = current
        for path, why in scan.damaged.items():
            if path not in self.damaged_seen:
                out.append({"ts": ts, "event": "counters_damaged", "path": path, "why": why})
        # Only the files damaged now: jobs can create any number of names over a long watch.
        self.damaged_seen = set(scan.damaged)
        self.damaged_why = scan.damaged
        for path, why in scan.refused.items():
            if self.refused_why.get(path) != why:
                out.append({"ts": ts, "event": "counters_refused", "path": path, "why": why})
        self.refused_why = scan.refused
        return out

    # ---- views
    def snapshot(self) -> dict:
        now = time.monotonic()
        links = []
        for hist in self.links.values():
            hist.prune(now, self.flap_window)
            links.append({k: v for k, v in hist.record("state", self.flap_count).items() if k not in ("ts", "event")})
        return {"links": links, "counters": [c.to_dict() for c in self.counters.values()],
                "damaged": dict(sorted(self.damaged_why.items())), "refused": dict(sorted(self.refused_why.items()))}

    def problems(self) -> list[str]:
        """Why `watch --once` exits 1: links down or flapping. A netdev set down by an administrator
        counts only when it was named with --nic; one that is up without carrier always counts."""
        # a --nic that names nothing here (a typo, a NIC gone) must not read as healthy
        out = [f"{name}: no such netdev or InfiniBand port" for name in sorted(self.only or ())
               if name not in self.present]
        for hist in self.links.values():
            if hist.up is False and (hist.admin_up is not False or self.only is not None):
                out.append(f"{hist.name} is down")
            elif len(hist.downs) >= self.flap_count:
                out.append(f"{hist.name} is flapping ({len(hist.downs)} downs)")
        return out

    def write_prometheus(self, path: str) -> None:
        write_atomic(Path(path), self.prometheus())

    def prometheus(self) -> str:
        def label(value) -> str:
            return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

        snap = self.snapshot()
        lines = ["# HELP fleetctl_failover_link_up Link or IB port up (1) or down (0).",
                 "# TYPE fleetctl_failover_link_up gauge"]
        lines += [f'fleetctl_failover_link_up{{link="{label(l["link"])}",kind="{l["kind"]}"}} {int(bool(l["up"]))}'
                  for l in snap["links"]]
        lines += ["# HELP fleetctl_failover_link_downs Down transitions within the flap window.",
                  "# TYPE fleetctl_failover_link_downs gauge"]
        lines += [f'fleetctl_failover_link_downs{{link="{label(l["link"])}",kind="{l["kind"]}"}} {l["downs"]}'
                  for l in snap["links"]]
        lines += ["# HELP fleetctl_failover_link_flapping 1 when the link went down at least the flap count "
                  "within the flap window.", "# TYPE fleetctl_failover_link_flapping gauge"]
        lines += [f'fleetctl_failover_link_flapping{{link="{label(l["link"])}",kind="{l["kind"]}"}} '
                  f'{int(l["flapping"])}' for l in snap["links"]]
        lines += ["# HELP fleetctl_failover_link_flap_period_seconds Mean time between downs in the window.",
                  "# TYPE fleetctl_failover_link_flap_period_seconds gauge"]
        lines += [f'fleetctl_failover_link_flap_period_seconds{{link="{label(l["link"])}",kind="{l["kind"]}"}} '
                  f'{l["period_s"]}' for l in snap["links"] if l["period_s"] is not None]
        # Counters end in _total (Prometheus's convention; what prometheus_client writes): this text is
        # written by hand because nodes run `failover watch` without the [lens] extra's prometheus_client.
        lines += ["# HELP fleetctl_failover_link_carrier_changes_total The kernel's carrier change count of a netdev.",
                  "# TYPE fleetctl_failover_link_carrier_changes_total counter"]
        lines += [f'fleetctl_failover_link_carrier_changes_total{{link="{label(l["link"])}"}} {l["carrier_changes"]}'
                  for l in snap["links"] if l["carrier_changes"] is not None]
        live = [c for c in snap["counters"] if c["alive"]]
        for name in counters_mod.FIELDS:
            family = f"fleetctl_failover_plugin_{name}" + ("" if name in ("connections", "paths_up") else "_total")
            kind = "counter" if family.endswith("_total") else "gauge"
            lines += [f"# HELP {family} The fleet plugin's {name} of a live process.", f"# TYPE {family} {kind}"]
            lines += [f'{family}{{pid="{c["pid"]}"}} {c[name]}' for c in live]
        return "\n".join(lines) + "\n"
