"""Node groups in a NODESET given on the command line: `@gpu`, `@rack:r12`, `@partition:batch`,
`@job:4242`, with ClusterShell's operators (`@gpu!@partition:maint`, `@job:4242&@rack:r12`).

Where the groups come from, never a shell (ClusterShell's own resolver runs groups.conf's shell
commands, which fleetctl never does as root in a Prolog):
- the site file's `[groups.static]` (name -> node set);
- static clush group files (`groups.files`, default `/etc/clustershell/groups.d/*.yaml`, ClusterShell's
  YAML form `source: {group: nodeset}`): `@group` looks in every source, `@source:group` in one;
- Slurm: `@partition:NAME` (or clush's `@slurmpart:NAME`) and `@job:ID` (`@slurmjob:ID`), read
  through the site's Slurm backend.

Only command-line node sets resolve groups; node sets in site files, Slurm output and node documents
stay plain (`fleetctl.nodeset.parse_nodeset` refuses `@`). Sizes are bounded: group files, the number
and depth of references, and the node count (`MAX_NODES`).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable

from fleetctl.errors import ConfigError, UsageError
from fleetctl.nodeset import MAX_NODES, NodeSet, empty, fold, parse_nodeset, split_operators

MAX_GROUP_FILE = 4 << 20  # bytes of one YAML group file
MAX_GROUP_FILES = 64
MAX_DEPTH = 8  # groups referring to groups
MAX_REFERENCES = 10_000  # group references expanded for one node set
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}\Z")
_SLURM = {"partition": "partition", "slurmpart": "partition", "job": "job", "slurmjob": "job"}


class NodeGroups:
    """Resolves `@` references; `slurm` is called lazily (a command line without Slurm groups never
    asks Slurm) and returns the site's Slurm backend."""

    def __init__(self, *, static: dict[str, str] | None = None, files: list[str] | tuple[str, ...] = (),
                 slurm: Callable[[], object] | None = None):
        self.static = dict(static or {})
        self.files = list(files)
        self.slurm = slurm
        self._sources: dict[str, dict[str, str]] | None = None
        self._references = 0

    def expand(self, text: str, *, what: str = "node set") -> str:
        """`text` with every group replaced by its nodes, folded; text without `@` is returned as is."""
        if "@" not in text:
            return text
        self._references = 0
        return fold(self._evaluate(text, what, 0))

    # ---- evaluation: operands left to right, as ClusterShell reads `a,b!c` as (a | b) - c
    def _evaluate(self, text: str, what: str, depth: int, source: str = "") -> NodeSet:
        """`source`: the group source whose value this is; its own groups need no prefix there."""
        if depth > MAX_DEPTH:
            raise UsageError(f"{what}: groups nested more than {MAX_DEPTH} deep (a group that contains itself?)")
        result = empty()
        for op, operand in _split(text):
            if operand.startswith("@"):
                nodes = self._groups(operand[1:], what, depth, source)
            else:
                nodes = parse_nodeset(operand, what=what)
            if op == ",":
                result.update(nodes)
            elif op == "!":
                result.difference_update(nodes)
            elif op == "&":
                result.intersection_update(nodes)
            else:
                result.symmetric_difference_update(nodes)
            if len(result) > MAX_NODES:
                raise UsageError(f"{what} has more than {MAX_NODES:,} nodes")
        return result

    def _groups(self, ref: str, what: str, depth: int, context: str) -> NodeSet:
        """One `@[source:]name` operand; the name may be a range of groups (`@racks:rack[3-4]`)."""
        source, sep, name = ref.partition(":")
        if not sep:
            source, name = "", ref
        if (source and not _NAME.match(source)) or not _NAME.match(name.replace("[", "").replace("]", "")
                                                                     .replace(",", "")):
            raise UsageError(f"invalid group @{ref[:80]} in {what}: a group name is 1-128 letters, digits, "
                             "'_', '.' or '-' (ranges in brackets)")
        if source in _SLURM:
            return self._slurm_group(_SLURM[source], name, what)
        names = list(parse_nodeset(name, what=f"group name in {what}")) if "[" in name else [name]
        result = empty()
        for one in names:
            self._references += 1
            if self._references > MAX_REFERENCES:
                raise UsageError(f"{what}: more than {MAX_REFERENCES:,} group references")
            where, value = self._static_value(source or context, one, what)
            result.update(self._evaluate(value, f"group @{where + ':' if where else ''}{one}", depth + 1, where))
        return result

    def _static_value(self, source: str, name: str, what: str) -> tuple[str, str]:
        """(the source it was found in, the group's node-set text); source "" is the site's static
        groups first, then every group file's source in turn."""
        if not source and name in self.static:
            return "", self.static[name]
        sources = self.sources()
        if source:
            if source not in sources:
                raise UsageError(f"unknown group source {source!r} in {what} (group files: "
                                 f"{', '.join(self.files) or 'none'})")
            if name in sources[source]:
                return source, sources[source][name]
        else:
            for found_in, groups in sources.items():
                if name in groups:
                    return found_in, groups[name]
        raise UsageError(f"unknown group @{source + ':' if source else ''}{name} in {what}",
                         hint="groups come from the site's [groups.static], clush group files "
                              "(groups.files) and Slurm (@partition:NAME, @job:ID)")

    def _slurm_group(self, kind: str, name: str, what: str) -> NodeSet:
        if self.slurm is None:
            raise UsageError(f"@{kind}:{name} in {what} needs Slurm, and there is no Slurm to ask here")
        backend = self.slurm()
        if kind == "partition":
            names = [n.name for n in backend.nodes() if name in n.partitions]
            if not names:
                raise UsageError(f"@partition:{name} in {what}: Slurm knows no node in partition {name!r}")
        else:
            if not name.isdigit():
                raise UsageError(f"invalid job id {name!r} in @job:{name}")
            jobs = backend.jobs(job_ids=[name])
            names = [n for job in jobs for n in job.nodes]
            if not names:
                raise UsageError(f"@job:{name} in {what}: Slurm knows no running job {name} with nodes")
        return parse_nodeset(fold(names), what=f"@{kind}:{name}")

    # ---- clush group files
    def sources(self) -> dict[str, dict[str, str]]:
        if self._sources is None:
            self._sources = load_group_files(self.files)
        return self._sources


def load_group_files(patterns: list[str]) -> dict[str, dict[str, str]]:
    """Every source of the static clush group files matching `patterns` (ClusterShell's YAML:
    `source: {group: nodeset}`); a later file's source of the same name adds to it."""
    import yaml

    from fleetctl.filekit import read_text

    paths = sorted({p for pattern in patterns for p in glob.glob(pattern)})
    if len(paths) > MAX_GROUP_FILES:
        raise ConfigError(f"more than {MAX_GROUP_FILES} group files match {', '.join(patterns)}")
    sources: dict[str, dict[str, str]] = {}
    for path in paths:
        text = read_text(path, "group file", max_bytes=MAX_GROUP_FILE, error=ConfigError)
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not a YAML group file: {str(exc).splitlines()[0]}") from None
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}: a group file maps sources to groups (source: {{group: nodeset}})")
        for source, groups in doc.items():
            if not isinstance(source, str) or not isinstance(groups, dict):
                raise ConfigError(f"{path}: source {str(source)[:60]!r} must map group names to node sets")
            for name, value in groups.items():
                if not isinstance(name, str) or not isinstance(value, (str, int)):
                    raise ConfigError(f"{path}: {source}: group {str(name)[:60]!r} must be a node set (text)")
                sources.setdefault(source, {})[name] = str(value)
    return sources


def _split(text: str) -> list[tuple[str, str]]:
    """`a,@b!c` -> [(',', 'a'), (',', '@b'), ('!', 'c')]; an operator with nothing beside it is an error."""
    out = [(op, operand.strip()) for op, operand in split_operators(text)]
    empty_operand = next((op for op, operand in out if not operand), None)
    if empty_operand is not None:
        raise UsageError(f"invalid node set {text[:200]!r}: nothing next to {empty_operand!r}")
    return out


def groups_for_site(cluster, slurm: Callable[[], object] | None) -> NodeGroups:
    """The site's groups (static and clush files) and its Slurm; without a site, the default files."""
    if cluster is None:
        return NodeGroups(files=["/etc/clustershell/groups.d/*.yaml"], slurm=slurm)
    groups = cluster.data.get("groups", {})
    return NodeGroups(static=groups.get("static", {}), files=groups.get("files", []), slurm=slurm)

