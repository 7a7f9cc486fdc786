"""Clock offsets and drifts per host, tracked over time (software clock sync, Huygens-style).

Every `refit_s` the tracker fits the clock network (analysis.clock via analysis.windows.host_clock)
over the last `horizon_s` of NIC-pair probes, relative to the first host of each connected
component. Between fits the last model serves the windows' one-way delays. Each fit is compared
with the previous one's prediction: a host whose offset moved by more than `jump_us` has jumped;
one whose drift is beyond `max_drift_ppm` is out of bounds. Both become `clock` findings on the
host's clock (element type `clock`), which the event machine turns into events.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from fleetctl.analysis.windows import host_clock
from fleetctl.errors import DataError

MAX_PROBES = 200_000  # per fit: the horizon's probes, evenly thinned beyond this
HISTORY = 120  # fits remembered per host (status, drift over time)


class ClockTracker:
    def __init__(self, hosts: list[str], nic_host: np.ndarray, refit_s: float = 5.0,
                 horizon_s: float = 20.0, jump_us: float = 500.0, max_drift_ppm: float = 200.0,
                 hold_s: float = 5.0):
        self.hosts, self.nic_host = hosts, nic_host
        self.refit_s, self.horizon_s = refit_s, horizon_s
        self.jump_us, self.max_drift_ppm, self.hold_s = jump_us, max_drift_ppm, hold_s
        self.chunks: deque[np.ndarray] = deque()
        self.model = None
        self.epoch_ns = 0
        self.last_fit = -1e18
        self.history: dict[str, deque] = {h: deque(maxlen=HISTORY) for h in hosts}
        self.jumps: dict[str, tuple[float, float]] = {}  # host -> (until t, jump us)

    def add(self, probes: np.ndarray) -> None:
        """A window's answered NIC-pair probes."""
        ok = probes[(probes["dst_nic"] >= 0) & (probes["lost"] == 0)]
        if ok.size:
            self.chunks.append(ok)

    def maybe_refit(self, t_end: float) -> bool:
        if t_end - self.last_fit < self.refit_s:
            return False
        cut = int((t_end - self.horizon_s) * 1e9)
        while self.chunks and self.chunks[0]["t_send"].max(initial=0) < cut:
            self.chunks.popleft()
        if not self.chunks:
            return False
        probes = np.concatenate(list(self.chunks))
        if probes.size > MAX_PROBES:
            probes = probes[:: int(np.ceil(probes.size / MAX_PROBES))]
        epoch = int(probes["t_send"].min())
        try:
            model = host_clock(probes, self.nic_host, self.hosts, epoch)
        except (DataError, ValueError, np.linalg.LinAlgError):
            return False
        self._compare(model, epoch, t_end)
        self.model, self.epoch_ns, self.last_fit = model, epoch, t_end
        return True

    def offset_at(self, model, epoch_ns: int, h: int, t: float) -> float:
        """Seconds host h is ahead of its component's reference at wall time t."""
        return float(model.offset[h] + model.drift[h] * (t - epoch_ns * 1e-9))

    def _compare(self, model, epoch: int, t: float) -> None:
        for h, host in enumerate(self.hosts):
            if not np.isfinite(model.offset[h]):
                continue
            off = self.offset_at(model, epoch, h, t)
            drift_ppm = float(model.drift[h]) * 1e6
            self.history[host].append((round(t, 3), round(off * 1e6, 3), round(drift_ppm, 3)))
            if self.model is not None and np.isfinite(self.model.offset[h]) and \
                    self.model.component[h] == model.component[h]:
                predicted = self.offset_at(self.model, self.epoch_ns, h, t)
                jump = (off - predicted) * 1e6
                if abs(jump) > self.jump_us:
                    self.jumps[host] = (t + self.hold_s, round(jump, 1))

    def findings(self, t_end: float) -> list[dict]:
        out = []
        for host, hist in self.history.items():
            if not hist:
                continue
            _t, off_us, drift_ppm = hist[-1]
            why = []
            jump = self.jumps.get(host)
            if jump and jump[0] >= t_end:
                why.append(f"clock jumped by {jump[1]:g} us")
            elif jump:
                del self.jumps[host]
            if abs(drift_ppm) > self.max_drift_ppm:
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
