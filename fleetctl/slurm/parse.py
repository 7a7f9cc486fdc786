"""Parsers of Slurm command output, in forms that 22.05, 24.11 and 26.05 all print (docs/slurm-versions.md).

- `scontrol show node|reservation --oneliner`: one record per line, `Key=Value` fields separated by
  spaces. Values may hold spaces (OS=Linux 6.1.0 #1 SMP ..., Reason=free text [user@time]), so a field
  starts only where a space is followed by `Key=`; Reason is cut out first using its `[user@time]`
  suffix, because free text may contain anything.
- `squeue -h -o` with '|' between fields and the free-text job name last.

Reasons: Slurm 24.11 keeps a node's last Reason (and its [user@time]) after `State=RESUME`, on an
IDLE node; 22.05 and 26.05 clear it. A reason counts only while the node is drained, down, failing or waiting
for a reboot, so that a stale one is never taken for a drain in force (docs/slurm-versions.md).

`--json` is not used: in 22.05 it is served by the openapi v0.0.3x plugins, in 24.11 by data_parser
v0.0.40+, with different document shapes.
"""

from __future__ import annotations

import re


from fleetctl.errors import SlurmError
from fleetctl.slurm.base import Reservation, SlurmJob, SlurmNode

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
_REASON = re.compile(r"(?:^|(?<=\s))Reason=")
_REASON_TAIL = re.compile(r" \[([^\[\]\s@]+)@([^\[\]\s]+)\]")
NULL = {"(null)", "n/a", "N/A", "none", "None", ""}

# squeue fields, in order; the job name is last because it is free text and may hold the separator.
SQUEUE_FIELDS = ("job_id", "state", "user", "partition", "nodelist", "reason", "name")
SQUEUE_FORMAT = "|".join(("%i", "%T", "%u", "%P", "%N", "%r", "%j"))


def parse_record(line: str) -> dict[str, str]:
    """`A=1 B=two words C=x=y` -> {"A": "1", "B": "two words", "C": "x=y"}.

    A Reason field becomes Reason, ReasonUser and ReasonTime.
    """
    line = line.strip()
    out: dict[str, str] = {}
    m = _REASON.search(line)
    if m:
        rest = line[m.end():]
        tail = _REASON_TAIL.search(rest)
        if tail:
            out["Reason"] = rest[:tail.start()].strip()
            out["ReasonUser"], out["ReasonTime"] = tail.group(1), tail.group(2)
            after = rest[tail.end():]
        else:
            nxt = _KEY.search(rest)
            out["Reason"] = (rest[:nxt.start()] if nxt else rest).strip()
            after = rest[nxt.start():] if nxt else ""
        line = (line[:m.start()] + " " + after).strip()
    keys = list(_KEY.finditer(line))
    if line and (not keys or keys[0].start() != 0):
        raise SlurmError(f"cannot parse Slurm output: {line[:80]!r}")
    for i, k in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.setdefault(k.group(1), line[k.end():end].strip())
    return out


def parse_records(text: str) -> list[dict[str, str]]:
    return [parse_record(line) for line in text.splitlines() if line.strip()]


def _list(value: str | None) -> list[str]:
    if value is None or value in NULL:
        return []
    return [v for v in value.split(",") if v]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def expand_nodelist(text: str) -> list[str]:
    if text in NULL:
        return []
    from fleetctl.errors import UsageError
    from fleetctl.nodeset import expand

    try:
        return expand(text)
    except UsageError as exc:
        raise SlurmError(f"cannot parse Slurm node list: {exc.message}") from None


def parse_state(text: str) -> tuple[str, list[str]]:
    """`IDLE+DRAIN` -> ("IDLE", ["DRAIN"]); sinfo-style suffixes (`*`, `~`) are dropped."""
    parts = [p.strip().rstrip("*~#!%$@^-").upper() for p in text.split("+") if p.strip()]
    if not parts:
        return "UNKNOWN", []
    return parts[0], parts[1:]


# A node's Reason is in force only in these states (as state or flag); Slurm's own `sinfo -R` lists
# the same nodes.
_REASON_STATES = ("DRAIN", "DOWN", "FAIL", "REBOOT", "INVAL", "MAINT", "POWER_DOWN", "UNKNOWN")


def reason_in_force(state: str, flags: list[str]) -> bool:
    return any(word in part for part in (state, *flags) for word in _REASON_STATES)


def node_from_record(rec: dict[str, str]) -> SlurmNode:
    if "NodeName" not in rec:
        raise SlurmError(f"Slurm node record without NodeName: {sorted(rec)[:5]}")
    state, flags = parse_state(rec.get("State", ""))
    reason = rec.get("Reason", "")
    if reason in NULL or not reason_in_force(state, flags):
        reason = ""  # 24.11 keeps the last reason on a resumed node: no longer in force
    return SlurmNode(
        name=rec["NodeName"], state=state, flags=flags, reason=reason,
        reason_user=rec.get("ReasonUser", "") if reason else "",
        reason_time=rec.get("ReasonTime", "") if reason else "",
        partitions=_list(rec.get("Partitions")), features=_list(rec.get("AvailableFeatures")),
        active_features=_list(rec.get("ActiveFeatures")),
        cpus=_int(rec.get("CPUTot")), real_memory_mb=_int(rec.get("RealMemory")),
        address=rec.get("NodeAddr", ""),
    )


def parse_nodes(text: str) -> list[SlurmNode]:
    """Output of `scontrol show node --oneliner`."""
    return [node_from_record(r) for r in parse_records(text)]


def reservation_from_record(rec: dict[str, str]) -> Reservation:
    if "ReservationName" not in rec:
        raise SlurmError(f"Slurm reservation record without ReservationName: {sorted(rec)[:5]}")
    nodelist = rec.get("Nodes", "")
    return Reservation(
        name=rec["ReservationName"], nodes=expand_nodelist(nodelist),
        nodelist="" if nodelist in NULL else nodelist,
        flags=[f.upper() for f in _list(rec.get("Flags"))],
        start_time=rec.get("StartTime", ""), end_time=rec.get("EndTime", ""),
        duration=rec.get("Duration", ""), users=_list(rec.get("Users")),
        state=rec.get("State", ""),
        partition="" if rec.get("PartitionName", "") in NULL else rec["PartitionName"],
    )


def parse_reservations(text: str) -> list[Reservation]:
    """Output of `scontrol show reservation --oneliner` (including "No reservations in the system")."""
    if text.strip().lower().startswith("no reservations"):
        return []
    return [reservation_from_record(r) for r in parse_records(text)]


def parse_squeue(text: str) -> list[SlurmJob]:
    """Output of `squeue -h -o SQUEUE_FORMAT`."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS):
            raise SlurmError(f"cannot parse squeue line {line[:80]!r}")
        rec = dict(zip(SQUEUE_FIELDS, parts))
        nodelist = rec["nodelist"].strip()
        jobs.append(SlurmJob(
            job_id=rec["job_id"].strip(), state=rec["state"].strip().upper(), user=rec["user"].strip(),
            partition=rec["partition"].strip(), name=rec["name"],
            nodes=expand_nodelist(nodelist), nodelist="" if nodelist in NULL else nodelist,
            reason="" if rec["reason"].strip() in NULL else rec["reason"].strip(),
        ))
    return jobs
