"""A fabric finding: what a probe run blames (an element of the fabric view), and how sure it is.

Built by the roll-up (analysis/rollup.py) and by the discovery checks (mesh/discovery.py), merged
across windows by its identity `key`, and serialised by `to_dict` to the documented JSON of
`audit --mesh` (docs/mesh-probing.md) and the run file's findings table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetctl.model.fabric import Element
from fleetctl.model.severity import SEVERITY_RANK


@dataclass
class Finding:
    element: Element  # a link direction (or `both`), a switch, a NIC or a host
    metric: str  # loss | delay | down
    severity: str  # critical | major | minor
    confidence: float  # 0..1
    evidence: dict = field(default_factory=dict)
    source: str = ""  # "discovery" for the dead-link checks; empty for triangulation
    windows: list[int] | None = None  # windows in which it was found (after merging)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The stable identity: the same element and metric in two windows or runs is one finding."""
        return finding_key(self.element.to_dict(), self.metric)

    def to_dict(self) -> dict:
        out = {"element": self.element.to_dict(), "metric": self.metric, "severity": self.severity,
               "confidence": self.confidence, "evidence": self.evidence}
        if self.source:
            out["source"] = self.source
        if self.windows is not None:
            out["windows"] = list(self.windows)
        return out


def finding_key(element: dict, metric: str) -> tuple[str, str, str, str]:
    """Identity of a finding from its JSON element and metric (what `Finding.key` is)."""
    return element["type"], element["id"], element.get("direction", ""), metric


def sort_key(f: dict) -> tuple:
    """Most severe first, then most confident, then by element id (serialised findings)."""
    return -SEVERITY_RANK[f["severity"]], -f["confidence"], f["element"]["id"]
