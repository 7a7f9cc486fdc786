"""Node sets (`gpu[001-064,070]`) as values, on top of ClusterShell's NodeSet.

Every command that takes nodes parses them here, so bad input gives one clear error everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetException

from fleetctl.errors import UsageError

__all__ = ["NodeSet", "parse_nodeset", "fold", "expand"]


def parse_nodeset(text: str | Iterable[str], *, what: str = "node set") -> NodeSet:
    """Parse `node[1-4],gpu07` (or an iterable of such strings) into a NodeSet.

    ClusterShell operators work too: `node[1-8]!node3` (difference), `a&b`, `a^b`.
    """
    parts = [text] if isinstance(text, str) else list(text)
    result = NodeSet()
    for part in parts:
        part = part.strip()
        if not part:
            continue
        if any(ch.isspace() for ch in part):
            raise UsageError(f"invalid {what} {part!r}: whitespace inside a node set")
        try:
            result.update(NodeSet(part))
        except (NodeSetException, ValueError, TypeError) as exc:
            raise UsageError(f"invalid {what} {part!r}: {exc}") from None
    return result


def expand(text: str | Iterable[str]) -> list[str]:
    """The node names of a node set, in ClusterShell's natural order."""
    return list(parse_nodeset(text))


def fold(names: Iterable[str]) -> str:
    """The folded form of some node names: node1,node2,node3 -> node[1-3]."""
    return str(NodeSet.fromlist(list(names)))
