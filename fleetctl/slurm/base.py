"""The Slurm interface every fleetctl package uses, and the records it returns.

A backend is one file implementing SlurmBackend; `fleetctl.slurm.get_backend(name)` picks it.
Records are plain dataclasses with `to_dict()` so commands can print them as JSON unchanged.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field

from fleetctl.errors import SlurmError, SlurmUnreachable  # noqa: F401 (re-exported by fleetctl.slurm)

# Node state flags that mean "will not get new jobs" (Slurm prints them joined with '+').
UNAVAILABLE_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING",
                               "NOT_RESPONDING", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                               "POWERED_DOWN", "POWER_DOWN", "INVALID_REG", "FUTURE", "UNKNOWN"})


@dataclass
class SlurmNode:
    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: list[str] = field(default_factory=list)  # DRAIN, NOT_RESPONDING, RESERVED, ...
    reason: str = ""  # text only, without Slurm's ` [user@time]` suffix
    reason_user: str = ""
    reason_time: str = ""  # as Slurm prints it (ISO 8601 local time)
    partitions: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)  # available features
    active_features: list[str] = field(default_factory=list)
    cpus: int | None = None
    real_memory_mb: int | None = None
    address: str = ""

    @property
    def states(self) -> list[str]:
        return [self.state] + self.flags

    @property
    def state_text(self) -> str:
        """Slurm's own combined form: IDLE+DRAIN."""
        return "+".join(self.states)

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm will not start new jobs on it."""
        return "DRAIN" in self.flags or self.state in ("DRAINED", "DRAINING")

    @property
    def available(self) -> bool:
        return not (set(self.states) & UNAVAILABLE_FLAGS)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["state_text"] = self.state_text
        out["drained"] = self.drained
        return out


@dataclass
class SlurmJob:
    job_id: str
    state: str  # RUNNING, PENDING, COMPLETING, ...
    user: str = ""
    partition: str = ""
    name: str = ""
    nodes: list[str] = field(default_factory=list)  # expanded node names
    nodelist: str = ""  # as Slurm prints it, folded
    reason: str = ""  # why pending, or None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Reservation:
    name: str
    nodes: list[str] = field(default_factory=list)
    nodelist: str = ""
    flags: list[str] = field(default_factory=list)  # upper case: MAINT, IGNORE_JOBS, ...
    start_time: str = ""
    end_time: str = ""
    duration: str = ""
    users: list[str] = field(default_factory=list)
    state: str = ""  # ACTIVE or INACTIVE
    partition: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ResumeResult:
    resumed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # node -> why it was left alone
    # Resumed, but slurmctld had not heard from their slurmd by the end of the wait (shown `idle*`).
    not_responding: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DrainResult:
    reason: str  # the reason written: `<prefix>:<code> <text>`, cleaned and cut
    drained: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why it was left alone

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class NodeLookup:
    """Nodes Slurm knows, and the names it does not know (a site file ahead of slurm.conf)."""

    found: dict[str, SlurmNode] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)


class SlurmBackend(abc.ABC):
    """What fleetctl needs from Slurm. Every method raises SlurmError on failure."""

    name = "abstract"

    def __init__(self, *, drain_prefix: str = "fleetctl"):
        self.drain_prefix = drain_prefix

    @abc.abstractmethod
    def ping(self) -> str:
        """Check slurmctld answers; return its version string."""

    @abc.abstractmethod
    def nodes(self, nodes: list[str] | None = None) -> list[SlurmNode]:
        """All nodes, or the given ones (names Slurm does not know raise SlurmError)."""

    def lookup(self, nodes: list[str]) -> NodeLookup:
        """The nodes Slurm knows among `nodes` and those it does not: one unknown name must not stop
        the others. This default asks for all at once and, when that fails for another reason than
        an unreachable slurmctld, asks node by node; backends override it with one call."""
        out = NodeLookup()
        if not nodes:
            return out
        try:
            out.found = {n.name: n for n in self.nodes(nodes)}
        except SlurmUnreachable:
            raise
        except SlurmError:
            for name in nodes:
                try:
                    out.found.update((n.name, n) for n in self.nodes([name]))
                except SlurmUnreachable:
                    raise
                except SlurmError:
                    pass
        out.unknown = [n for n in nodes if n not in out.found]
        return out

    @abc.abstractmethod
    def jobs(self, *, job_ids: list[str] | None = None, nodes: list[str] | None = None,
             states: list[str] | None = None) -> list[SlurmJob]:
        """Jobs (default: pending and running), optionally those of some ids or on some nodes."""

    @abc.abstractmethod
    def drain(self, nodes: list[str], code: str, text: str = "", *, force: bool = False) -> DrainResult:
        """Drain nodes with reason `<prefix>:<code> <text>`.

        A node that already carries somebody else's reason (an operator's drain, Slurm's own "Not
        responding") is skipped unless `force`: overwriting that reason with ours would let a later
        fleetctl resume undo the operator's drain.
        """

    @abc.abstractmethod
    def resume(self, nodes: list[str], *, wait_s: float = 10.0) -> ResumeResult:
        """Resume the nodes whose reason starts with `<prefix>:`; refuse (and say why) the others.

        slurmctld marks a resumed node NOT_RESPONDING until its next ping of the node's slurmd
        answers (`idle*`, usually within a second or two): wait up to `wait_s` for that, so that a
        resumed node takes jobs when this returns; those still silent are listed in not_responding.
        """

    @abc.abstractmethod
    def wait_responding(self, names: list[str], wait_s: float = 10.0) -> list[str]:
        """Wait up to `wait_s` for slurmctld to hear from the nodes; return those still NOT_RESPONDING."""

    @abc.abstractmethod
    def reservations(self, name: str | None = None) -> list[Reservation]:
        """All reservations, or the one named (missing -> empty list)."""

    @abc.abstractmethod
    def create_reservation(self, name: str, nodes: list[str], *, flags: list[str] = (),
                           users: list[str] = (), start: str = "now",
                           duration: str = "infinite", partition: str = "") -> Reservation:
        """Create a reservation and return it as Slurm reports it."""

    @abc.abstractmethod
    def update_reservation(self, name: str, *, nodes: list[str] | None = None,
                           flags: list[str] | None = None, users: list[str] | None = None,
                           duration: str | None = None) -> Reservation:
        """Change a reservation; fields left None are unchanged."""

    @abc.abstractmethod
    def delete_reservation(self, name: str) -> None:
        """Delete a reservation."""

    @abc.abstractmethod
    def requeue(self, job_id: str, *, hold: bool = False) -> None:
        """Requeue a batch job (optionally held)."""

    def signal_job(self, job_id: str, signal: str) -> None:
        """Send `signal` (a name: USR2) to every step of a job. Backends that cannot raise."""
        raise SlurmError(f"the {self.name} Slurm backend cannot signal a job")

    def reboot(self, nodes: list[str], reason: str) -> None:
        """Ask Slurm to reboot the nodes once idle (RebootProgram), then resume them when they are
        back (`nextstate=RESUME`): the node's health check and Prolog judge it on its return."""
        raise SlurmError(f"the {self.name} Slurm backend cannot reboot a node")

    def cancel_reboot(self, nodes: list[str]) -> None:
        """Withdraw a reboot not yet issued."""
        raise SlurmError(f"the {self.name} Slurm backend cannot cancel a reboot")
