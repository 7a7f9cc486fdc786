"""Policies: the site file's [[act.policies]] tables, each mapping detections to actions.

    [[act.policies]]
    name = "xid-fatal"
    source = "audit"                 # audit | lens | hook
    codes = ["xid.79", "xid.48"]     # fnmatch patterns on the check code (audit, hook)
    severities = ["critical"]
    min_confidence = 0.9
    actions = ["snapshot", "drain", "swap", "notify"]
    cooldown_s = 600

    [[act.policies]]
    name = "lossy-link"
    source = "lens"
    element_types = ["link"]
    metrics = ["loss", "down"]
    actions = ["snapshot"]           # for the jobs crossing the link

Actions always run in the order snapshot, drain, swap, reset-gpu, reboot, resume, service-request,
notify, whatever the order written: a snapshot after the drain would be a snapshot of a job already
moving, and the ladder climbs from the cheapest repair (docs/act.md, "The remediation ladder"). A policy with
`shadow = true` logs every decision as `dry-run` while the other policies act.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from fleetctl.act.detections import Detection
from fleetctl.errors import ConfigError

ACTIONS = ("snapshot", "migrate", "drain", "swap", "reset-gpu", "reboot", "resume", "service-request", "notify")
REMEDIATION = ("drain", "swap", "reset-gpu", "reboot", "resume")  # paused by the circuit breaker
RUNGS = ("reset-gpu", "reboot")  # the ladder's repairs: a re-audit after each decides the resume
SOURCES = ("audit", "lens", "hook")


@dataclass(frozen=True)
class Policy:
    name: str
    source: str
    actions: tuple[str, ...]
    codes: tuple[str, ...] = ()
    severities: tuple[str, ...] = ("critical",)
    element_types: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    min_confidence: float = 0.9
    cooldown_s: float = 600.0
    webhook: str = ""
    shadow: bool = False  # decisions logged as dry-run while other policies act

    def matches(self, det: Detection) -> bool:
        if det.source != self.source:
            return False
        if self.severities and det.severity not in self.severities:
            return False
        if self.codes and not any(fnmatch.fnmatchcase(det.code, pat) for pat in self.codes):
            return False
        if self.element_types and (det.element or {}).get("type") not in self.element_types:
            return False
        if self.metrics and det.metric not in self.metrics:
            return False
        return True

    @property
    def ordered_actions(self) -> list[str]:
        return [a for a in ACTIONS if a in self.actions]

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def policies_from_site(cluster) -> list[Policy]:
    return parse_policies(cluster.data.get("act", {}).get("policies", []), cluster.source)


def parse_policies(raw: list[dict], source: str = "<site>") -> list[Policy]:
    """Policies from validated tables (the schema checked types and ranges); the rest is checked here."""
    out, names = [], set()
    for i, table in enumerate(raw):
        key = f"act.policies[{i}]"
        name = table.get("name", "")
        if not name or name in names:
            raise ConfigError(f"policy name {name!r} is empty or used twice", path=source, key=f"{key}.name")
        names.add(name)
        actions = tuple(table.get("actions", []))
        bad = [a for a in actions if a not in ACTIONS]
        if bad or not actions:
            raise ConfigError(f"unknown or no actions {bad or actions}; choose from {', '.join(ACTIONS)}",
                              path=source, key=f"{key}.actions")
        src = table.get("source", "audit")
        if src not in SOURCES:
            raise ConfigError(f"unknown source {src!r}", path=source, key=f"{key}.source")
        if "notify" in actions and not table.get("webhook"):
            raise ConfigError("the notify action needs a webhook URL", path=source, key=f"{key}.webhook")
        webhook = table.get("webhook", "")
        if webhook and not webhook.startswith(("http://", "https://")):
            raise ConfigError(f"webhook {webhook[:80]!r} is not an http(s) URL", path=source,
                              key=f"{key}.webhook")
        if set(RUNGS) & set(actions) and "drain" not in actions:
            raise ConfigError("reset-gpu and reboot need drain in the same policy (a node is repaired out of "
                              "service)", path=source, key=f"{key}.actions")
        if src == "lens" and set(actions) & {"drain", "swap", *RUNGS} and \
                set(table.get("element_types", [])) - {"host", "nic", "port", "link"}:
            raise ConfigError("drain, swap and the ladder need an element that names a node (host, nic, port or a "
                              "host link)", path=source, key=f"{key}.actions")
        out.append(Policy(name=name, source=src, actions=actions, codes=tuple(table.get("codes", [])),
                          severities=tuple(table.get("severities", ["critical"])),
                          element_types=tuple(table.get("element_types", [])),
                          metrics=tuple(table.get("metrics", [])),
                          min_confidence=float(table.get("min_confidence", 0.9)),
                          cooldown_s=float(table.get("cooldown_s", 600.0)), webhook=webhook,
                          shadow=bool(table.get("shadow", False))))
    return out
