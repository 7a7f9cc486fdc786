"""Write a discovery as a commented site file, valid by the schema (it is parsed back before it is
written), never overwriting an existing file unless asked.

Every text here that a node reported (kernel and driver versions, GPU models, switch names, LLDP
errors, deviations) is data: a value is a TOML basic string with every control character escaped,
and a comment is one line with every non-printable character blanked. A kernel string holding
"\n[lens]\n..." once became a live [lens] table that parse_site accepted."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.config.tomlwrite import toml_value
from fleetctl.discover.classes import ClassSpec
from fleetctl.discover.fabric import FabricSpec
from fleetctl.errors import UsageError
from fleetctl.filekit import clean_text


def _v(value) -> str:
    """A discovered value as TOML: an integral float is written as an integer (24 GiB, not 24.0)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list):
        return "[" + ", ".join(_v(x) for x in value) + "]"
    return toml_value(value)


def comment(text: object) -> str:
    """One comment line: a node's text can never end the comment and start a table."""
    return "# " + clean_text(text, 400)


def _table(lines: list[str], header: str, values: dict, comments: list[str] = ()) -> None:
    lines.append("")
    lines.extend(comment(c) for c in comments)
    lines.append(header)
    lines.extend(f"{k} = {_v(v)}" for k, v in values.items() if v not in (None, ""))


def render(*, cluster: str, classes: list[ClassSpec], fabric: FabricSpec, access: dict, slurm: dict,
           checks: dict, notes: list[str], sources: list[str]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    nodes = sum(len(c.nodes) for c in classes)
    lines = [f"# Written by `fleetctl site discover` on {stamp}: {nodes} nodes in {len(classes)} classes, "
             f"{len(fabric.switches)} switches, {len(fabric.links)} links.",
             comment(f"Sources: {', '.join(sources) or 'nodes only'}. Every value below was observed or "
                     "inferred; refine it and keep it under version control."),
             "# Expected values are each class's majority; `observed` comments show what is not pinned "
             "(empty means: only fleet consistency is checked)."]
    lines += [comment(f"note: {n}") for n in notes]
    _table(lines, "[cluster]", {"name": cluster, "description": "discovered by fleetctl site discover"})
    _table(lines, "[access]", {k: v for k, v in access.items() if not isinstance(v, dict)})
    for sub, values in access.items():
        if isinstance(values, dict):
            _table(lines, f"[access.{sub}]", values)
    if slurm:
        _table(lines, "[slurm]", slurm)
    if checks:
        _table(lines, "[checks]", checks)
    for c in classes:
        comments = [f"{len(c.nodes)} nodes with the same GPUs, CPUs and fabric NICs"]
        if c.observed:
            low, high = c.observed.get("memory_gb_range") or (0, 0)
            comments.append(f"observed: kernel {c.observed.get('kernel') or '?'}, GPU driver "
                            f"{c.observed.get('gpu_driver') or 'none'}, memory {low:g}-{high:g} GiB")
        comments += [f"deviation: {d['node']} {d['what']} = {d['value']} (class majority {d['expected']})"
                     for d in c.deviations[:20]]
        if len(c.deviations) > 20:
            comments.append(f"... and {len(c.deviations) - 20} more deviations")
        _table(lines, "[[node_classes]]", {"name": c.name, "nodes": c.nodeset, "cpus": c.cpus,
                                            "memory_gb": c.memory_gb}, comments)
        if c.gpus.get("count"):
            _table(lines, "[node_classes.gpus]", c.gpus)
        for nic in c.nics:
            _table(lines, "[[node_classes.nics]]", nic)
    tiers = {1: "leaf", 2: "spine", 3: "core", 4: "tier 4"}
    for sid, info in sorted(fabric.switches.items(), key=lambda kv: (kv[1]["tier"], _natural(kv[0]))):
        _table(lines, "[[fabric.switches]]", {"id": sid, "tier": info["tier"], "model": info.get("model", ""),
                                              "address": info.get("address", "")},
               [f"{tiers.get(info['tier'], '')} (tier from the cabling)"]
               + ([info["comment"]] if info.get("comment") else []))
    for link in sorted(fabric.links, key=lambda l: _natural(l.id)):
        _table(lines, "[[fabric.links]]", {"id": link.id, "a": link.a, "b": link.b, "a_address": link.a_address,
                                           "b_address": link.b_address,
                                           "rate_gbps": link.rate_gbps or None})
    return "\n".join(lines).strip() + "\n"


def _natural(text: str):
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def write_site(path: str | os.PathLike, text: str, *, force: bool = False) -> Path:
    """Validate `text` as a site file, then write it atomically (refusing to replace a file unless
    `force`)."""
    from fleetctl.config import parse_site

    target = Path(path)
    parse_site(text, source=str(target))  # what config check would say, before anything is written
    if target.exists() and not force:
        raise UsageError(f"{target} exists: give --force to replace it, or --diff {target} to compare")
    write_atomic(target, text)
    return target
