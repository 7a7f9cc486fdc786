"""Folding like clubak: hosts with identical results are shown once, under their folded node set."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from fleetctl.fanout.result import OK, HostResult
from fleetctl.nodeset import fold


@dataclass(frozen=True)
class Group:
    """Nodes whose status, exit code, stdout, stderr and error are all identical."""

    nodes: tuple[str, ...]
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    error: str

    @property
    def nodeset(self) -> str:
        return fold(self.nodes)

    def to_dict(self) -> dict:
        return {"nodes": self.nodeset, "count": len(self.nodes), "status": self.status,
                "exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr,
                "error": self.error}


def group_results(results: Iterable[HostResult]) -> list[Group]:
    """Groups of identical results: ok first, failures last (nearest the summary), then by size
    (largest first), then node set.

    Duration is left out of the key: two hosts that printed the same thing agree however long
    each took. So are a node's own name and addresses in fleetctl's error line: fifty nodes that
    timed out are one group (`connect to <address>:22 timed out after 10 s`); a group of one keeps
    its error as it was."""
    buckets: dict[tuple, list[HostResult]] = {}
    for r in results:
        key = (r.status, r.exit_code, r.stdout, r.stderr, generalize_error(r.error, r.node))
        buckets.setdefault(key, []).append(r)
    groups = [Group(tuple(r.node for r in members), *key[:4], members[0].error if len(members) == 1 else key[4])
              for key, members in buckets.items()]
    groups.sort(key=lambda g: (g.status != OK, -len(g.nodes), g.nodeset))
    return groups


_ADDRESS = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])"          # IPv4
                      r"|(?<![\w:])[0-9A-Fa-f:]*::[0-9A-Fa-f:]*(?![\w:])"      # IPv6, compressed
                      r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])")  # IPv6, full


def generalize_error(error: str, node: str) -> str:
    """An error line with the node's own name and any address made generic."""
    if not error:
        return error
    return generalize_node(_ADDRESS.sub("<address>", error), node)


def generalize_node(text: str, node: str) -> str:
    """`text` with the node's name as a word (not inside gpu10 for gpu1) written <node>."""
    return re.sub(r"(?<![\w.-])" + re.escape(node) + r"(?![\w-])", "<node>", text)


def status_counts(results: Iterable[HostResult]) -> dict[str, int]:
    """How many hosts ended in each status, ok first then by count."""
    counts = Counter(r.status for r in results)
    return dict(sorted(counts.items(), key=lambda kv: (kv[0] != OK, -kv[1], kv[0])))


def nodes_by_status(results: Iterable[HostResult]) -> dict[str, str]:
    """Folded node set of each status: {"ok": "node[1-3]", "timeout": "node4"}."""
    names: dict[str, list[str]] = {}
    for r in results:
        names.setdefault(r.status, []).append(r.node)
    return {status: fold(nodes) for status, nodes in names.items()}
