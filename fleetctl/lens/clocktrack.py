"""Clock offsets and drifts per host, tracked over time (software clock sync, Huygens-style).

Every `refit_s` the tracker fits the clock network (analysis.clock via analysis.windows.host_clock)
over the last `horizon_s` of NIC-pair probes, relative to the first host of each connected
component. Between fits the last model serves the windows' one-way delays. Each fit is compared
with the previous one's prediction: a host whose offset moved by more than `jump_us` has jumped;
one whose drift is beyond `max_drift_ppm` is out of bounds. Both become `clock` findings on the
host's clock (element type `clock`), which the event machine turns into events.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace

import numpy as np

from fleetctl.analysis.summaries import flow_rows
from fleetctl.analysis.windows import host_clock
from fleetctl.errors import DataError
from fleetctl.model.fabric import PROBE_DTYPE

MAX_PROBES = 400_000  # per fit, after the reduction to one record per host pair, direction and
# window (20,000 records a window at 1,280 hosts x 8 NICs); evenly thinned beyond this
# a fit runs at most this share of the time: at 1,280 hosts one takes ~2 s, so the refit period
# stretches from 5 s to ~8 s (the model's drift carries the offsets between fits)
FIT_SHARE_INVERSE = 4.0
FIT_NICE = 10  # the fit worker's niceness: below the windows' loop where they share a core
HISTORY = 120  # fits remembered per host (status, drift over time)
# an estimate that moves by more than this between fits makes the delay baselines of the host's
# paths be learnt again (lens.coordinator): they hold the old estimate's error
MOVED_US = 5.0


class ClockTracker:
    def __init__(self, hosts: list[str], nic_host: np.ndarray, refit_s: float = 5.0,
                 horizon_s: float = 20.0, jump_us: float = 500.0, max_drift_ppm: float = 200.0,
                 hold_s: float = 5.0, worker_process: bool = False):
        # worker_process: fit in a worker process (fit_elsewhere), not under the coordinator's GIL
        self.worker_process = worker_process
        self.hosts, self.nic_host = hosts, nic_host
        self.refit_s, self.horizon_s = refit_s, horizon_s
        self.jump_us, self.max_drift_ppm, self.hold_s = jump_us, max_drift_ppm, hold_s
        self.chunks: deque[np.ndarray] = deque()
        self.fit: tuple = (None, 0)  # (ClockModel, its epoch in ns)
        self.window_fit: tuple = (None, 0)  # the same for the windows' one-way delays (_for_windows)
        self.last_fit = -1e18
        self.fit_cost_s = 0.0  # CPU time of the last fit (the refit period stretches to it)
        self.adds = 0  # windows added
        self.quiet_last: dict[str, int] = {}  # host -> the last window (add) it was quiet in
        self.history: dict[str, deque] = {h: deque(maxlen=HISTORY) for h in hosts}
        self.jumps: dict[str, tuple[float, float]] = {}  # host -> (until t, jump us)
        self._busy = False
        self.fit_seq = 0  # fits made
        self.moved: dict[str, float] = {}  # hosts whose estimate the last fit moved (us)
        self._plan_cache: tuple | None = None  # (flow table, _PlanColumns): add_summary
        self.window_share = 1.0 / max(1.0, horizon_s)  # of MAX_PROBES per second of probes
        # no fit over less time than this: one window of bounds pins the offsets but not the
        # drift (a fit over lens's first 1 s window of summaries read 828 ppm for a 20 ppm host:
        # a false `clock` finding), and a wrong drift misplaces every later window's delays
        self.min_span_s = min(3.0, horizon_s / 2)

    def add(self, probes: np.ndarray, quiet: set[str] = frozenset()) -> None:
        """A window's answered NIC-pair probes (or summaries' bounds, analysis.summaries.
        clock_records), reduced to what a fit uses: per host pair and direction the tightest
        bound each way (tightest_per_host_pair), then thinned evenly beyond the cap. Nothing
        from or to a host in `quiet` (overloaded or not running in the window): a stalled
        responder stamps its echo late, and a late t3 is a falsely tight bound, which the
        tightest-bound reduction would pick (the 64-host lab: false `clock` events)."""
        self._note_quiet(quiet)
        ok = probes[(probes["dst_nic"] >= 0) & (probes["lost"] == 0)]
        if quiet and ok.size:
            bad = self._quiet_mask(quiet)
            ok = ok[~(bad[self.nic_host[ok["src_nic"]]] | bad[self.nic_host[ok["dst_nic"]]])]
        self._keep(tightest_per_host_pair(ok, self.nic_host))

    def add_summary(self, s, flows: np.ndarray, quiet: set[str] = frozenset()) -> None:
        """`add` of a window of summaries (analysis.summaries), read straight from their rows:
        the same records as add(clock_records(s, flows)) keeps, without making a probe record
        of every answered row first (306,000 a window at 1,280 x 8: ~70 -> ~48 ms on this
        project's loaded 2-core machine)."""
        self._note_quiet(quiet)
        r = s.rows
        fi = flow_rows(s, flows)
        plan = self._plan_columns(flows)
        sel = np.flatnonzero((r["answered"] > 0) & (plan.key[fi] >= 0))
        fi = fi[sel]
        if quiet and sel.size:
            bad = self._quiet_mask(quiet)
            keep = ~(bad[plan.src_host[fi]] | bad[plan.dst_host[fi]])
            sel, fi = sel[keep], fi[keep]
        src, dst = plan.src_nic[fi], plan.dst_nic[fi]
        up, down = r["bound_fwd"][sel], r["bound_rev"][sel]
        if r.size and r["window"].min() == r["window"].max():
            # one row a flow: grouped by host pair through the plan's order of its flows, no
            # sort of the rows (12 -> 4 ms at 1,280 x 8); a tie goes to the lower flow row, not
            # the earlier row (equally tight bounds, either one bounds the clock as well)
            slot = np.full(len(flows), -1, dtype=np.int64)
            slot[plan.rank[fi]] = np.arange(fi.size)
            order = slot[slot >= 0]
            best_up, best_down = _best_of_groups(order, plan.key[fi[order]], up, down)
        else:
            best_up, best_down = _tightest(src, dst, up, down, self.nic_host)
        t1, t4 = r["bound_t1"][sel], r["bound_t4"][sel]
        out = np.zeros(best_up.size, PROBE_DTYPE)
        out["flow"] = r["flow"][sel[best_up]]
        out["src_nic"], out["dst_nic"] = src[best_up], dst[best_up]
        out["t_send"] = t1[best_up]
        out["t_remote_rx"] = t1[best_up] + up[best_up]
        out["t_recv"] = t4[best_down]
        out["t_remote_tx"] = t4[best_down] + down[best_down]
        self._keep(out)

    def _plan_columns(self, flows: np.ndarray) -> "_PlanColumns":
        """The flow table's NICs, hosts, host-pair keys (-1: a loop) and each flow's rank in
        the order of those keys, built once per plan (the flow table this tracker is given)."""
        cached = self._plan_cache
        if cached is not None and cached[0] is flows:
            return cached[1]
        src = flows["src_nic"].astype(np.int64)
        dst = flows["dst_nic"].astype(np.int64)
        src_h = self.nic_host[np.maximum(src, 0)].astype(np.int64)
        dst_h = np.where(dst >= 0, self.nic_host[np.maximum(dst, 0)], -1).astype(np.int64)
        n = int(self.nic_host.max()) + 1 if self.nic_host.size else 1
        key = np.where(dst >= 0, src_h * n + dst_h, -1)
        rank = np.empty(len(flows), dtype=np.int64)
        rank[np.argsort(key, kind="stable")] = np.arange(len(flows))
        cols = _PlanColumns(src, dst, src_h, dst_h, key, rank)
        self._plan_cache = (flows, cols)
        return cols

    def _note_quiet(self, quiet: set[str]) -> None:
        self.adds += 1
        for host in quiet:
            self.quiet_last[host] = self.adds

    def _quiet_mask(self, quiet: set[str]) -> np.ndarray:
        return np.array([h in quiet for h in self.hosts], dtype=bool)

    def _keep(self, ok: np.ndarray) -> None:
        """A window's reduced records into the horizon, thinned evenly beyond the cap."""
        per_window = max(1, int(MAX_PROBES * self.window_share))
        if ok.size > per_window:
            ok = ok[:: int(np.ceil(ok.size / per_window))]
        if ok.size:
            self.chunks.append(ok)
        cut = ok["t_send"].max(initial=0) - int(self.horizon_s * 1e9) if ok.size else 0
        while self.chunks and self.chunks[0]["t_send"].max(initial=0) < cut:
            self.chunks.popleft()

    def maybe_refit(self, t_end: float, background: bool = False) -> bool:
        """Fit again when `refit_s` has passed; with `background`, in a thread (the windows go
        on with the previous model meanwhile)."""
        if t_end - self.last_fit < self.refit_period_s() or self._busy:
            return False
        if background:
            self._busy = True
            self.last_fit = t_end
            chunks = list(self.chunks)

            def work():
                try:
                    self._refit(t_end, chunks)
                finally:
                    self._busy = False

            threading.Thread(target=work, name="lens-clock", daemon=True).start()
            return True
        return self._refit(t_end, list(self.chunks))

    def refit_period_s(self) -> float:
        """refit_s, stretched so fits take at most 1 / FIT_SHARE_INVERSE of the time, but not
        by the first fit's cost: that fit covers a few seconds of bounds (its drifts read up to
        270 ppm for clocks within 30 ppm), no window uses it until a second fit confirms it
        (_for_windows), and at 1,280 hosts it took 12.8 s of CPU where the next took 1.3: the
        second fit came 51 s later, every host's one-way delay unmeasured until then, and it
        moved them all by up to 14 ms (the pinned harness)."""
        if self.fit_seq < 2:
            return self.refit_s
        return max(self.refit_s, FIT_SHARE_INVERSE * self.fit_cost_s)

    def _refit(self, t_end: float, chunks: list) -> bool:
        cut = int((t_end - self.horizon_s) * 1e9)
        chunks = [c for c in chunks if c["t_send"].max(initial=0) >= cut]
        if not chunks:
            return False
        probes = np.concatenate(chunks)
        t = probes["t_send"]
        if probes.size == 0 or (int(t.max()) - int(t.min())) * 1e-9 < self.min_span_s:
            return False
        if probes.size > MAX_PROBES:
            probes = probes[:: int(np.ceil(probes.size / MAX_PROBES))]
        epoch = int(probes["t_send"].min())
        try:
            if self.worker_process:
                model, self.fit_cost_s = fit_elsewhere(probes, self.nic_host, self.hosts, epoch)
            else:
                model, self.fit_cost_s = _fit(probes, self.nic_host, self.hosts, epoch)
        except (DataError, ValueError, np.linalg.LinAlgError):
            return False
        self._compare(model, epoch, t_end)
        self.window_fit = (self._for_windows(model), epoch)
        self.fit = (model, epoch)  # one assignment: readers never see a mixed pair
        self.last_fit = t_end
        self.fit_seq += 1  # after `moved`: a reader that sees the new number sees its hosts
        return True

    def _moved(self, prev, prev_epoch: int, model, epoch: int, t: float) -> dict[str, float]:
        """Hosts whose estimate moved by more than MOVED_US against the previous fit's
        prediction (us), each against the median move of its component: offsets are relative
        to a reference host, delays only to each other. A move is a better estimate (early fits
        over a few seconds of bounds misjudge the drift; at 1,280 hosts a host was 30 us off)
        or a clock that changed; either way delays learnt with the old estimate are off by it."""
        if prev is None:
            return {}
        h = np.arange(len(self.hosts))
        # only hosts the windows used the previous fit for: a host's first fit is not used
        # (_for_windows), so no delay was learnt with it (a first fit over 3 s of bounds and
        # the next one 25 s on: 1,268 hosts "moved" by up to 11 ms, 456,000 baselines dropped)
        used = np.array([len(self.history[x]) >= 2 for x in self.hosts], dtype=bool)
        ok = used & np.isfinite(model.offset) & np.isfinite(prev.offset) & \
            (np.asarray(model.component) == np.asarray(prev.component))
        now = model.offset + model.drift * (t - epoch * 1e-9)
        predicted = prev.offset + prev.drift * (t - prev_epoch * 1e-9)
        delta = np.where(ok, now - predicted, np.nan)
        comp = np.asarray(model.component)
        out: dict[str, float] = {}
        for c in np.unique(comp[ok]).tolist():
            members = h[ok & (comp == c)]
            centred = (delta[members] - np.median(delta[members])) * 1e6
            for i in np.flatnonzero(np.abs(centred) > MOVED_US).tolist():
                out[self.hosts[int(members[i])]] = round(float(centred[i]), 1)
        return out

    def _for_windows(self, model):
        """The model the windows' one-way delays use: a host's estimate only once a second fit
        has followed its first (offset NaN before: its paths' one-way delay is not measured).
        A first fit covers a few seconds of bounds and can misjudge a drift by hundreds of ppm;
        extrapolated over the next seconds its offsets were milliseconds off, every path of such
        a host looked slow, and a sharded harness's merge opened delay events on ten NIC cables
        (the host-side rule caught most of those hosts, not all)."""
        confirmed = np.array([len(self.history[h]) >= 2 for h in self.hosts], dtype=bool)
        if confirmed.all():
            return model
        return replace(model, offset=np.where(confirmed, model.offset, np.nan))

    @property
    def model(self):
        return self.fit[0]

    @property
    def epoch_ns(self) -> int:
        return self.fit[1]

    def offset_at(self, model, epoch_ns: int, h: int, t: float) -> float:
        """Seconds host h is ahead of its component's reference at wall time t."""
        return float(model.offset[h] + model.drift[h] * (t - epoch_ns * 1e-9))

    def _compare(self, model, epoch: int, t: float) -> None:
        prev, prev_epoch = self.fit
        ref_now = _references(model)
        ref_prev = _references(prev) if prev is not None else {}
        self.moved = self._moved(prev, prev_epoch, model, epoch, t)
        for h, host in enumerate(self.hosts):
            if not np.isfinite(model.offset[h]):
                continue
            off = self.offset_at(model, epoch, h, t)
            drift_ppm = float(model.drift[h]) * 1e6
            self.history[host].append((round(t, 3), round(off * 1e6, 3), round(drift_ppm, 3)))
            # offsets are relative to their component's reference host: a jump means something
            # only against the same reference (a host that went quiet hands the role to another,
            # and every offset moves by the difference of the two clocks)
            # and only against a fit that knew the host's drift: not the host's first (a few
            # seconds of bounds: in a 512-host harness the first fit read 150-2,000 ppm for
            # clocks within 30 ppm, its prediction 8 s on was 1-12 ms off: 243 false jumps),
            # nor one whose drift is beyond the bound (the drift rule speaks for such a clock)
            if prev is not None and np.isfinite(prev.offset[h]) and len(self.history[host]) >= 3 and \
                    abs(float(prev.drift[h])) * 1e6 <= self.max_drift_ppm and \
                    ref_prev.get(int(prev.component[h])) == ref_now.get(int(model.component[h])):
                predicted = self.offset_at(prev, prev_epoch, h, t)
                jump = (off - predicted) * 1e6
                if abs(jump) > self.jump_us:
                    self.jumps[host] = (t + self.hold_s, round(jump, 1))

    def findings(self, t_end: float, quiet: set[str] = frozenset()) -> list[dict]:
        """`clock` findings at t_end; none on a host in `quiet` (its agent overloaded or not
        running this window: late software timestamps and a thin fit are fleetctl's own
        measurement, never the host's clock), nor on one quiet in any window the fit covers."""
        out = []
        memory = max(1, int(round(self.horizon_s)))  # windows of about a second: the horizon
        for host, hist in self.history.items():
            # quiet now, or within the fit's horizon: the fit has that host's doubtful data in
            # it (on the 64-host lab, hosts overloaded on and off raised false jumps in between)
            if not hist or host in quiet or self.adds - self.quiet_last.get(host, -memory) < memory:
                continue
            _t, off_us, drift_ppm = hist[-1]
            why = []
            jump = self.jumps.get(host)
            if jump and jump[0] >= t_end:
                why.append(f"clock jumped by {jump[1]:g} us")
            elif jump:
                del self.jumps[host]
            # a drift beyond the bound in two fits in a row, the same way: one fit over a
            # thin or odd stretch (a harness's 512-host start: six hosts at +-1,000 ppm, put
            # right by the next fit) is the fit's own error, not the host's clock
            if abs(drift_ppm) > self.max_drift_ppm and len(hist) >= 2 and \
                    abs(hist[-2][2]) > self.max_drift_ppm and hist[-2][2] * drift_ppm > 0:
                why.append(f"drift {drift_ppm:g} ppm beyond +-{self.max_drift_ppm:g} ppm")
            if why:
                out.append({"element": {"type": "clock", "id": host}, "metric": "clock",
                            "severity": "warning", "confidence": 0.9,
                            "evidence": {"offset_us": off_us, "drift_ppm": drift_ppm,
                                         "why": "; ".join(why),
                                         "jump_us": jump[1] if jump else None}})
        return out

    def status(self) -> list[dict]:
        out = []
        for host, hist in self.history.items():
            if hist:
                t, off_us, drift_ppm = hist[-1]
                out.append({"host": host, "offset_us": off_us, "drift_ppm": drift_ppm,
                            "fitted_at": t, "fits": len(hist)})
        return out


@dataclass
class _PlanColumns:
    src_nic: np.ndarray  # (F,) int64, per flow of the plan
    dst_nic: np.ndarray
    src_host: np.ndarray
    dst_host: np.ndarray  # -1: a loop
    key: np.ndarray  # src host * hosts + dst host; -1: a loop
    rank: np.ndarray  # the flow's place in the flows sorted by key (stable)


def tightest_per_host_pair(probes: np.ndarray, nic_host: np.ndarray) -> np.ndarray:
    """One record per (sender host, responder host) of a window: the send and remote receive
    times of its smallest t2 - t1, the remote send and receive times of its largest t3 - t4 (the
    fit's upper and lower bounds are separate; within a window it keeps the tightest per time
    bin anyway). Thinning records evenly instead left most host pairs of a 1,280-host fleet
    without enough bounds: 813 hosts fitted, offsets wrong by milliseconds."""
    if probes.size == 0:
        return probes
    best_up, best_down = _tightest(probes["src_nic"], probes["dst_nic"],
                                   probes["t_remote_rx"] - probes["t_send"],
                                   probes["t_remote_tx"] - probes["t_recv"], nic_host)
    out = probes[best_up].copy()
    out["t_remote_tx"], out["t_recv"] = probes["t_remote_tx"][best_down], probes["t_recv"][best_down]
    return out


def _tightest(src_nic: np.ndarray, dst_nic: np.ndarray, up: np.ndarray, down: np.ndarray,
              nic_host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (sender host, responder host), in the order of their keys: the record of its
    smallest `up` (t2 - t1) and the record of its largest `down` (t3 - t4), ties to the
    earliest record."""
    if src_nic.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n = int(nic_host.max()) + 1
    key = nic_host[src_nic].astype(np.int64) * n + nic_host[dst_nic]
    # one sort by key, then each group's first smallest `up` and first largest `down` (what two
    # two-key sorts gave, ties to the earliest record: 0.26 -> ~0.05 s a window at 1,280 x 8)
    # by key, ties in record order: key and index packed in one int64 and sorted (a stable
    # argsort of the keys took 63 ms at 306,000 records, this 12)
    packed = np.sort((key << 32) | np.arange(key.size, dtype=np.int64))
    return _best_of_groups(packed & 0xFFFFFFFF, packed >> 32, up, down)


def _best_of_groups(order: np.ndarray, k_sorted: np.ndarray, up: np.ndarray,
                    down: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_tightest` once its records are in `order` (grouped by their keys `k_sorted`)."""
    if order.size == 0:  # a window with no answered NIC-pair row (only loops, or all quiet)
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    head = np.r_[True, k_sorted[1:] != k_sorted[:-1]]
    starts = np.flatnonzero(head)
    group = np.cumsum(head) - 1
    best_up = _first_where(order, group, up[order] == np.minimum.reduceat(up[order], starts)[group])
    best_down = _first_where(order, group,
                             down[order] == np.maximum.reduceat(down[order], starts)[group])
    return best_up, best_down


def _first_where(order: np.ndarray, group: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """Per group (contiguous in `order`), the record of its first hit (every group has one)."""
    pos = np.flatnonzero(hit)
    g = group[pos]
    return order[pos[np.r_[True, g[1:] != g[:-1]]]]


def _references(model) -> dict[int, int]:
    """Component -> its reference host (the first host of it, held at offset 0)."""
    out: dict[int, int] = {}
    for h, c in enumerate(np.asarray(model.component).tolist()):
        if c >= 0 and c not in out:
            out[c] = h
    return out


def _fit(probes: np.ndarray, nic_host: np.ndarray, hosts: list[str], epoch: int):
    """(model, CPU seconds it took): CPU, not wall, so a starved machine does not stretch the
    refit period."""
    began = time.process_time()
    model = host_clock(probes, nic_host, hosts, epoch)
    return model, time.process_time() - began


_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def worker_pool() -> ProcessPoolExecutor:
    """The one fit worker of this process, started on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            # forkserver: a clean process, not a fork of this one and its threads
            _POOL = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"),
                                        initializer=_end_with, initargs=(os.getpid(),))
        return _POOL


def fit_elsewhere(probes: np.ndarray, nic_host: np.ndarray, hosts: list[str], epoch: int):
    """_fit in one worker process shared by every tracker of this process. At 1,280 hosts a fit
    is ~2 s of CPU every ~8 s: in a thread it held the coordinator's interpreter lock for a
    quarter of the time, and the windows' analysis waited on it (the scale harness,
    benchmarks/lens_harness.py, skipped windows). A worker that died is replaced once; a
    second failure in a row fits here."""
    global _POOL
    for _attempt in range(2):
        pool = worker_pool()
        try:
            return pool.submit(_fit, probes, nic_host, hosts, epoch).result()
        except (BrokenProcessPool, OSError, EOFError):
            with _POOL_LOCK:
                if _POOL is pool:
                    _POOL = None
            pool.shutdown(wait=False, cancel_futures=True)
    return _fit(probes, nic_host, hosts, epoch)


def _end_with(owner_pid: int) -> None:
    """The worker's initializer: at a lower CPU priority (FIT_NICE), and exit when the process
    that started it ends, however it ends.
    A forkserver worker holds the write ends of its own call queue and of the forkserver's
    liveness pipe, so a coordinator killed with SIGKILL left the worker (and with it the
    forkserver) blocked forever; a pidfd of the owner is readable once the owner has exited.
    The fit is background work: the windows go on with the last model meanwhile. On a core it
    shares with the coordinator (the harness pinned to one; a small management host) a fit at
    its own priority took the windows' time, and in some runs the first fits left the loop
    seconds behind, its oldest windows shed."""
    try:
        os.nice(FIT_NICE)
    except OSError:
        pass
    try:
        fd = os.pidfd_open(owner_pid)
    except ProcessLookupError:
        os._exit(0)
    except OSError:  # a kernel before 5.3: poll the pid instead
        fd = None

    def wait() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _alive(owner_pid):
                time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=wait, name="end-with-owner", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def stop_workers() -> None:
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
