"""act's settings from the site file's [act] table (docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActConfig:
    enabled: bool = False
    state_dir: str = "/var/lib/fleetctl/act"
    lens_events: str = ""
    max_drain_pct: float = 10.0
    max_drains_per_hour: int = 4
    breaker_pct: float = 10.0
    breaker_min_nodes: int = 3
    suspect_after: int = 2
    suspect_window_s: float = 7 * 86400.0
    service_webhook: str = ""
    gpu_busy_command: tuple[str, ...] = ("nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader",
                                         "-i", "{gpu}")
    gpu_reset_command: tuple[str, ...] = ("nvidia-smi", "--gpu-reset", "-i", "{gpu}")
    remedy_timeout_s: float = 120.0
    snapshot_timeout_s: float = 30.0
    migrate_timeout_s: float = 60.0
    migrate_connect_s: float = 2.0
    webhook_timeout_s: float = 5.0
    poll_s: float = 1.0

    @classmethod
    def from_site(cls, cluster, **overrides) -> "ActConfig":
        raw = dict(cluster.data.get("act", {}))
        raw.pop("policies", None)
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        known.update({k: v for k, v in overrides.items() if v is not None})
        from fleetctl.config.files import site_path

        for key in ("gpu_busy_command", "gpu_reset_command"):
            if key in known:
                known[key] = _argv(known[key], f"act.{key}", cluster.source)
        hook = known.get("service_webhook", "")
        if hook and (not isinstance(hook, str) or not hook.startswith(("http://", "https://")) or len(hook) > 2048):
            from fleetctl.errors import ConfigError

            raise ConfigError(f"service_webhook {str(hook)[:80]!r} is not an http(s) URL of at most 2048 "
                              "characters", path=cluster.source, key="act.service_webhook")
        for key in ("state_dir", "lens_events"):
            if known.get(key) and key not in overrides:
                known[key] = str(site_path(known[key], cluster.source))
        return cls(**known)


MAX_ARGV = 64  # words of a node-side command
MAX_WORD = 1024  # characters of one word


def _argv(words, key: str, source: str) -> tuple[str, ...]:
    """A node-side command as argv (run without a shell): 1-64 words, none empty, over 1024
    characters or holding a NUL or newline."""
    from fleetctl.errors import ConfigError

    if not words or len(words) > MAX_ARGV or any(not w or len(w) > MAX_WORD or "\0" in w or "\n" in w
                                                 for w in words):
        raise ConfigError(f"a command of 1-{MAX_ARGV} words, each 1-{MAX_WORD} characters on one line",
                          path=source, key=key)
    return tuple(words)
