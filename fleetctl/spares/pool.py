"""The spare pool: a Slurm reservation (site file `slurm.spare_reservation`) holding audited nodes.

Only nodes whose last audit passed within `spares.max_audit_age_s` join. `scontrol update reservation
Nodes=` replaces the whole list, so every change is read-modify-write under an exclusive flock on
`<spares.state_dir>/spares.lock`: two fleetctl processes on the same host never lose each other's
change; the result is read back from Slurm and compared with what was meant.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetctl.errors import DataError, SlurmError, UsageError
from fleetctl.filekit.locks import open_lock
from fleetctl.spares.verdicts import VerdictStore, passed_within

LOCK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SparesConfig:
    reservation: str = "fleetctl-spares"
    floor: int = 1
    max_audit_age_s: float = 3600.0
    state_dir: str = "/var/lib/fleetctl/spares"
    flags: tuple[str, ...] = ("MAINT", "IGNORE_JOBS")
    audit_level: str = "quick"

    @classmethod
    def from_site(cls, cluster, state_dir: str | None = None) -> "SparesConfig":
        from fleetctl.config.files import site_path

        sp = cluster.data.get("spares", {})
        if state_dir is None and sp.get("state_dir"):
            state_dir = str(site_path(sp["state_dir"], cluster.source))
        return cls(reservation=cluster.slurm["spare_reservation"], floor=sp.get("floor", 1),
                   max_audit_age_s=float(sp.get("max_audit_age_s", 3600.0)),
                   state_dir=state_dir or sp.get("state_dir", "/var/lib/fleetctl/spares"),
                   flags=tuple(sp.get("reservation_flags", ["MAINT", "IGNORE_JOBS"])),
                   audit_level=sp.get("audit_level", "quick"))


@dataclass
class PoolStatus:
    reservation: str
    exists: bool
    floor: int
    members: list[dict] = field(default_factory=list)  # node, state, in_use, verdict, audit_age_s
    warnings: list[str] = field(default_factory=list)

    @property
    def free(self) -> list[str]:
        return [m["node"] for m in self.members if m["free"]]

    def to_dict(self) -> dict:
        out = asdict(self)
        out["size"] = len(self.members)
        out["free"] = self.free
        return out


@dataclass(kw_only=True)
class Outcome:
    """What a pool command did: nodes refused (node -> why), warnings, and whether it only said."""

    refused: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PoolChange(Outcome):
    members_before: list[str]
    members_after: list[str]
    changed: list[str] = field(default_factory=list)


class SparePool:
    def __init__(self, backend, config: SparesConfig):
        self.backend = backend
        self.config = config
        self.verdicts = VerdictStore(config.state_dir)

    # ---- locking
    @contextmanager
    def locked(self):
        """Exclusive flock for read-modify-write of the reservation and the verdict file."""
        directory = Path(self.config.state_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = open_lock(directory / "spares.lock", wait_s=LOCK_TIMEOUT_S)
        except OSError as exc:
            raise DataError(f"cannot open the spares lock in {directory}: {exc.strerror}") from None
        if fd is None:
            raise DataError(f"another fleetctl holds {directory}/spares.lock for more than "
                            f"{LOCK_TIMEOUT_S:g} s")
        try:
            yield
        finally:
            os.close(fd)

    # ---- reading
    def members(self) -> list[str]:
        found = self.backend.reservations(self.config.reservation)
        return list(found[0].nodes) if found else []

    def status(self, now: float | None = None) -> PoolStatus:
        now = now or time.time()
        found = self.backend.reservations(self.config.reservation)
        out = PoolStatus(self.config.reservation, bool(found), self.config.floor)
        members = list(found[0].nodes) if found else []
        verdicts = self.verdicts.load()
        slurm = self.backend.lookup(members).found if members else {}
        for node in members:
            state = slurm.get(node)
            verdict = verdicts.get(node)
            in_use = state is not None and state.state in ("ALLOCATED", "MIXED", "COMPLETING")
            usable = state is not None and not state.drained and state.state not in ("DOWN", "FAIL")
            out.members.append({
                "node": node, "state": state.state_text if state else "UNKNOWN", "in_use": in_use,
                "free": usable and not in_use,
                "verdict": verdict["status"] if verdict else None,
                "audit_age_s": round(now - verdict["time"], 1) if verdict else None,
                "fail_codes": verdict.get("fail_codes", []) if verdict else []})
        if len(out.free) < self.config.floor:
            out.warnings.append(f"spare pool {self.config.reservation}: {len(out.free)} free spare(s), "
                                f"below the floor of {self.config.floor}")
        return out

    # ---- changing
    def add(self, nodes: list[str], *, dry_run: bool = False, now: float | None = None) -> PoolChange:
        if not nodes:
            raise UsageError("spares add: no nodes given")
        with self.locked():
            before = self.members()
            change = PoolChange(before, list(before), dry_run=dry_run)
            verdicts = self.verdicts.load()
            slurm = self.backend.lookup(nodes)
            for node in slurm.unknown:
                change.refused[node] = "not known to Slurm"
            for node in nodes:
                if node in change.refused:
                    continue
                if node in before:
                    change.refused[node] = "already in the pool"
                    continue
                state = slurm.found[node]
                if state.drained or state.state in ("DOWN", "FAIL"):
                    change.refused[node] = f"state {state.state_text}: resume or replenish it first"
                    continue
                if state.state in ("ALLOCATED", "MIXED") or "COMPLETING" in state.flags:
                    # the pool's reservation would keep that job from starting there again
                    # after a requeue (seen in the ETTR benchmark: the job stayed pending)
                    change.refused[node] = (f"state {state.state_text}: a job runs there; "
                                            "add it once the job has ended")
                    continue
                ok, why = passed_within(verdicts.get(node), self.config.max_audit_age_s, now)
                if not ok:
                    change.refused[node] = why
                    continue
                change.changed.append(node)
            change.members_after = sorted(set(before) | set(change.changed))
            if change.changed and not dry_run:
                self.write_members(before, change.members_after)
            return change

    def remove(self, nodes: list[str], *, dry_run: bool = False) -> PoolChange:
        if not nodes:
            raise UsageError("spares remove: no nodes given")
        with self.locked():
            before = self.members()
            change = PoolChange(before, list(before), dry_run=dry_run)
            for node in nodes:
                if node not in before:
                    change.refused[node] = "not in the pool"
                else:
                    change.changed.append(node)
            change.members_after = [n for n in before if n not in change.changed]
            self._floor_warning(change)
            if change.changed and not dry_run:
                self.write_members(before, change.members_after)
            return change

    def release_one(self, *, exclude: list[str] = (), dry_run: bool = False) -> tuple[str, PoolChange]:
        """Take one free spare out of the reservation (so any job may use it); return it.

        A free spare: in the pool, known to Slurm, not drained or down, running nothing."""
        with self.locked():
            status = self.status()
            free = [n for n in status.free if n not in set(exclude)]
            if not free:
                raise SlurmError(f"no free spare in {self.config.reservation} "
                                 f"(members: {', '.join(m['node'] for m in status.members) or 'none'})")
            node = free[0]
            before = [m["node"] for m in status.members]
            change = PoolChange(before, [n for n in before if n != node], [node], dry_run=dry_run)
            self._floor_warning(change)
            if not dry_run:
                self.write_members(before, change.members_after)
            return node, change

    def _floor_warning(self, change: PoolChange) -> None:
        if len(change.members_after) < self.config.floor:
            change.warnings.append(f"spare pool {self.config.reservation} drops to "
                                   f"{len(change.members_after)} node(s), below its floor of "
                                   f"{self.config.floor}: run `fleetctl spares replenish` or add nodes")

    def write_members(self, before: list[str], after: list[str]) -> None:
        """Make the reservation hold exactly `after` (create, update or delete), then read it back."""
        name = self.config.reservation
        if not after:
            if before:
                self.backend.delete_reservation(name)
            return
        if not before:
            self.backend.create_reservation(name, after, flags=list(self.config.flags), users=["root"])
        else:
            self.backend.update_reservation(name, nodes=after)
        now = sorted(self.members())
        if now != sorted(after):
            raise SlurmError(f"reservation {name} holds {','.join(now) or 'nothing'} after the change, "
                             f"not {','.join(sorted(after))}")
