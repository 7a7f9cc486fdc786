"""Node sets (`gpu[001-064,070]`) as values, on top of ClusterShell's NodeSet.

Every command that takes nodes parses them here, so bad input gives one clear error everywhere.

Node sets and node names are hostile input (site files, command lines, Slurm output, node documents)
and fleetctl runs as root in every Prolog, so this module is also the one guard on them:
- no group resolution: ClusterShell's default resolver substitutes a `@group` name into a shell
  command; every NodeSet here is built with RESOLVER_NOGROUP, `@` is rejected, and the process-wide
  default resolver is replaced by one without sources, so a NodeSet built anywhere else cannot run one
  (command-line NODESETs expand their groups first, without a shell: fleetctl.nodegroups);
- bounded size: the text length and the node count are checked before ClusterShell expands anything
  (ClusterShell's RangeSet is a set of ints: `gpu[1-9999999]` would take seconds and GBs);
- one node-name grammar (Slurm host names), since node names become file names and path components.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException, set_std_group_resolver
from ClusterShell.NodeUtils import GroupResolver, GroupResolverError

from fleetctl.errors import UsageError

__all__ = ["NodeSet", "parse_nodeset", "fold", "expand", "empty", "contains", "is_node_name",
           "check_node_name", "from_names", "natural_order", "split_operators", "MAX_NODES", "MAX_NODESET_TEXT",
           "MAX_NODE_NAME"]

MAX_NODES = 100_000  # nodes in one node set (and in one site file); far above any cluster we target
MAX_NODESET_TEXT = 65_536  # characters of one node-set text; folded sets of real clusters are short
MAX_NODE_NAME = 64  # characters of a node name (Linux HOST_NAME_MAX)

# Slurm host names: letters, digits, '_', '-', '.'; no leading '-' or '.', no '..', no '/'.
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
# What a node-set text may contain: name characters, ranges `[1-4,7/2]` and the operators , ! & ^
_NODESET_CHARS = re.compile(r"[A-Za-z0-9_.\-\[\],!&^/]*\Z")
_RANGE = re.compile(r"(\d{1,18})(?:-(\d{1,18}))?(?:/(\d{1,18}))?\Z")

# Any NodeSet built without an explicit resolver (here or in a library) gets this one: it has no
# sources, so `@group` raises instead of running groups.conf's shell commands.
set_std_group_resolver(GroupResolver())


def is_node_name(name: str) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= MAX_NODE_NAME and _NODE_NAME.match(name) is not None
            and ".." not in name)


def check_node_name(name: str, *, what: str = "node name") -> str:
    """Return `name` if it is a valid node name, else raise UsageError saying why."""
    if not is_node_name(name):
        raise UsageError(f"invalid {what} {str(name)[:80]!r}: a node name is 1-{MAX_NODE_NAME} letters, "
                         "digits, '_', '-' or '.', not starting with '-' or '.', without '..'")
    return name


def split_operators(text: str) -> list[tuple[str, str]]:
    """`a[1-2,4],b!c` -> [(',', 'a[1-2,4]'), (',', 'b'), ('!', 'c')]: each operand with the operator
    before it (',' for the first), split at operators outside brackets, in one pass."""
    out, depth, start, op = [], 0, 0, ","
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0 and ch in ",!&^":
            out.append((op, text[start:i]))
            op, start = ch, i + 1
    out.append((op, text[start:]))
    return out


def _operands(text: str) -> list[str]:
    return [operand for _, operand in split_operators(text)]


def _bound(text: str, what: str) -> int:
    """An upper bound of the nodes ClusterShell would expand for `text`, computed from the text alone.

    Every operand of `,` `!` `&` `^` is expanded in full, so the bound is the sum over operands of the
    product of their bracket sizes (`a[1-3]b[1-2]` = 6), whatever the operators."""
    total = 0
    for operand in _operands(text):
        size = 1
        for group in re.findall(r"\[([^\[\]]*)\]", operand):
            count = 0
            for element in group.split(","):
                m = _RANGE.match(element)
                if m is None:
                    raise UsageError(f"invalid {what} {text[:200]!r}: bad range {element!r}")
                start, stop, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
                count += max(0, stop - start) // max(step, 1) + 1
            size *= count
            if size > MAX_NODES:
                break
        total += size
        if total > MAX_NODES:
            raise UsageError(f"{what} {text[:200]!r} has more than {MAX_NODES:,} nodes")
    return total


def parse_nodeset(text: str | Iterable[str], *, what: str = "node set") -> NodeSet:
    """Parse `node[1-4],gpu07` (or an iterable of such strings) into a NodeSet.

    ClusterShell operators work too: `node[1-8]!node3` (difference), `a&b`, `a^b`. Node groups
    (`@name`) do not: they would run a shell command.
    """
    parts = [text] if isinstance(text, str) else list(text)
    result = NodeSet(resolver=RESOLVER_NOGROUP)
    budget = 0
    for part in parts:
        if not isinstance(part, str):
            raise UsageError(f"invalid {what}: expected text, got {type(part).__name__}")
        part = part.strip()
        if not part:
            continue
        if len(part) > MAX_NODESET_TEXT:
            raise UsageError(f"invalid {what}: {len(part):,} characters (at most {MAX_NODESET_TEXT:,})")
        if any(ch.isspace() for ch in part):
            raise UsageError(f"invalid {what} {part!r}: whitespace inside a node set")
        if "@" in part:
            raise UsageError(f"invalid {what} {part!r}: node groups (@name) are resolved only in a NODESET "
                             "given on the command line (docs/exec.md); write the nodes here, e.g. gpu[001-064]")
        if not _NODESET_CHARS.match(part):
            bad = next(ch for ch in part if not _NODESET_CHARS.match(ch))
            raise UsageError(f"invalid {what} {part!r}: character {bad!r} is not allowed in a node set")
        budget += _bound(part, what)
        if budget > MAX_NODES:
            raise UsageError(f"{what} has more than {MAX_NODES:,} nodes")
        try:
            result.update(NodeSet(part, resolver=RESOLVER_NOGROUP))
        except (NodeSetException, GroupResolverError, ValueError, TypeError, AssertionError) as exc:
            raise UsageError(f"invalid {what} {part!r}: {exc}") from None
    for name in result:
        check_node_name(name, what=f"node name in {what}")
    return result


def empty() -> NodeSet:
    """An empty NodeSet that never resolves groups."""
    return NodeSet(resolver=RESOLVER_NOGROUP)


def contains(nodes: str | NodeSet, node: str) -> bool:
    """Whether `node` (one node name) is in `nodes` (a NodeSet or its text); False for a non-name."""
    if not is_node_name(node):
        return False
    if isinstance(nodes, str):
        nodes = _parsed_or_empty(nodes)
    return node in nodes


@lru_cache(maxsize=64)
def _parsed_or_empty(text: str) -> NodeSet:
    # Reports ask "is node X in finding F" for every node and finding: parse each text once.
    # Callers only test membership, so sharing one NodeSet is safe.
    try:
        return parse_nodeset(text)
    except UsageError:
        return empty()


def expand(text: str | Iterable[str]) -> list[str]:
    """The node names of a node set, in ClusterShell's natural order."""
    return list(parse_nodeset(text))


def from_names(names: Iterable[str]) -> NodeSet:
    """A NodeSet of some node names, each checked against the node-name grammar (no ranges parsed)."""
    names = list(names)
    if len(names) > MAX_NODES:
        raise UsageError(f"more than {MAX_NODES:,} nodes")
    for name in names:
        check_node_name(name)
    return NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP)


def natural_order(names: Iterable[str]) -> list[str]:
    """Node names in natural order: node2 before node10."""
    return list(from_names(names))


def fold(names: Iterable[str]) -> str:
    """The folded form of some node names: node1,node2,node3 -> node[1-3]."""
    return str(from_names(names))
