"""Lens settings: the site file's `[lens]` table (schema.toml, docs/configuration.md), with the
command line's overrides applied by the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fleetctl.errors import UsageError

DEFAULT_STATE_DIR = "/var/lib/fleetctl/lens"


@dataclass
class LensOptions:
    state_dir: str = DEFAULT_STATE_DIR
    window_s: float = 1.0
    k_open: int = 1
    k_open_down: int = 1
    k_open_gray: int = 2
    m_close: int = 3
    flap_count: int = 3
    flap_window_s: float = 30.0
    rate: float | None = None  # probes/s per NIC pair; None: the plan's (mesh.probe_budget_pps)
    budget_pps: float = 2000.0
    coverage_k: int = 3
    sports: int = 8
    port: int = 61200  # away from the audit's 61100 so both can run at once
    sport_base: int = 61300
    health_window_s: float = 0.25
    echo_timeout_s: float = 0.2
    solver: str = "nnls"
    agent_hours: float = 24.0  # an agent's run length; it is restarted (planned) after it
    replan_s: float = 30.0  # how often node states are checked for a re-plan
    jobs_refresh_s: float = 10.0
    clock_jump_us: float = 500.0
    clock_max_drift_ppm: float = 200.0
    metrics_port: int = 0  # 0: no /metrics
    metrics_address: str = "127.0.0.1"
    metrics_max_connections: int = 16
    webhook_url: str = ""
    segment_s: float = 3600.0
    segment_retention: int = 24
    segments: bool = False  # opt-in: every probe record, ~60 bytes each, is kept
    # what agents send: per-window, per-flow summaries (O(flows) a window for the coordinator),
    # or every probe record ("records": needed by segments, which keep every record)
    agent_output: str = "summary"
    # in summary mode, the share of flows (0-1) whose every probe record agents also send, kept
    # under <state_dir>/debug-records for `lens records` (lens/debugrecords.py); 0: off
    debug_records: float = 0.0
    # how agents run: started by the coordinator over the site's transport, or node-resident
    # services that register with it (lens/register.py) on `listen` with the key in `key_file`
    agents: str = "started"
    listen: str = "0.0.0.0:61250"
    key_file: str = "/etc/fleetctl/lens.key"
    coordinator: str = ""  # where a node's `lens agent` registers (HOST:PORT)
    # who traces the flows' paths when a plan is made, with registered agents: the agents
    # themselves (no ssh from the coordinator) or the site's transport
    trace_via: str = "agents"
    trace_timeout_s: float = 90.0
    shard_max_hosts: int = 0  # > 0: this coordinator is one shard; publish for `lens merge`
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_site(cls, cluster) -> LensOptions:
        lens = dict(cluster.data.get("lens") or {})
        mesh = cluster.mesh
        o = cls()
        for key in ("state_dir", "window_s", "k_open", "k_open_down", "k_open_gray", "m_close",
                    "flap_count",
                    "flap_window_s", "rate", "metrics_port", "metrics_address",
                    "metrics_max_connections", "webhook_url",
                    "segment_s", "segment_retention", "health_window_s", "echo_timeout_s",
                    "replan_s", "clock_jump_us", "clock_max_drift_ppm", "port", "segments",
                    "agent_output", "agents", "listen", "key_file", "coordinator", "trace_via",
                    "trace_timeout_s", "shard_max_hosts", "debug_records"):
            if key in lens and lens[key] is not None:
                setattr(o, key, lens[key])
        if o.rate is not None and float(o.rate) <= 0:
            o.rate = None  # 0 in the site file: the plan's rate
        o.budget_pps = float(mesh.get("probe_budget_pps", o.budget_pps))
        o.coverage_k = int(mesh.get("coverage_k", o.coverage_k))
        o.sport_base = o.port + 100
        return o

    def validate(self) -> None:
        if not 0.2 <= self.window_s <= 60:
            raise UsageError(f"lens window {self.window_s:g} s: between 0.2 and 60 seconds")
        if self.rate is not None and not 0.1 <= self.rate <= 1000:
            raise UsageError(f"--rate {self.rate:g}: between 0.1 and 1000 probes/s per pair")
        if self.agent_output not in ("summary", "records"):
            raise UsageError(f"lens.agent_output {self.agent_output!r}: summary or records")
        if self.agents not in ("started", "registered"):
            raise UsageError(f"lens.agents {self.agents!r}: started or registered")
        if self.trace_via not in ("agents", "transport"):
            raise UsageError(f"lens.trace_via {self.trace_via!r}: agents or transport")
        if not 5 <= float(self.trace_timeout_s) <= 3600:
            raise UsageError(f"lens.trace_timeout_s {self.trace_timeout_s}: between 5 and 3600 seconds")
        share = self.debug_records
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise UsageError(f"lens.debug_records {share!r}: a share of flows between 0 and 1 "
                             "(0.01: one flow in a hundred)")
        for name in ("k_open", "k_open_down", "k_open_gray", "m_close", "flap_count"):
            if not 1 <= int(getattr(self, name)) <= 1000:
                raise UsageError(f"lens.{name} {getattr(self, name)}: between 1 and 1000")

    @property
    def records(self) -> bool:
        """Do agents send every probe record (segments keep them all), not summaries?"""
        return bool(self.segments) or self.agent_output == "records"

    @property
    def debug_share(self) -> float:
        """The share of flows sampled for the debug records: none in records mode (every record
        is sent already)."""
        return 0.0 if self.records else float(self.debug_records)

    @property
    def lag_s(self) -> float:
        """How long after a window's end its records are all in: echo timeout, then the
        responder's next batch, plus transport slack."""
        return self.echo_timeout_s + self.health_window_s + 0.3

    def path(self, name: str) -> Path:
        return Path(self.state_dir).expanduser() / name
