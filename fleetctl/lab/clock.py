"""The lab's clock-skew truth: each host's artificial clock offset and drift (lab up --clock-skew).

All namespaces share one kernel clock, so one-way delays are exact in the lab. To test clock-offset
estimation, `lab up --clock-skew` writes each host's artificial offset and drift as plain data
(`clock.json`, named by the site file's `lab.clock_file`); the probe engine reads that file as data
(mesh.collect.injected_clocks) and each host's agent stamps its packets through an "offset" clock
source. Tests check the estimate against `HostClock.offset_at()`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from fleetctl.errors import LabError


@dataclass(frozen=True)
class HostClock:
    node: str
    offset_ms: float
    drift_ppm: float
    t0: float

    def offset_at(self, t: float) -> float:
        """Seconds this host's clock is ahead of the true clock at true time t."""
        return self.offset_ms / 1000 + self.drift_ppm * 1e-6 * (t - self.t0)

    def now(self) -> float:
        t = time.time()
        return t + self.offset_at(t)

    def agent_clock_entry(self) -> dict:
        """The probe agent's clock-source entry that puts its timestamps on this host's clock."""
        return {"source": "offset", "offset_ms": self.offset_ms, "drift_ppm": self.drift_ppm,
                "t0": self.t0}


def host_clocks(state_dir: str | Path) -> dict[str, HostClock]:
    """Clocks of every host of the lab whose state lives in `state_dir` (the site's lab.state_dir);
    empty when the lab was built without --clock-skew."""
    path = Path(state_dir) / "state.json"
    try:
        st = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: cannot read the lab state: {exc}") from None
    truth = st.get("clock")
    if not truth:
        return {}
    return {node: HostClock(node, v["offset_ms"], v["drift_ppm"], truth["t0"])
            for node, v in truth["hosts"].items()}
