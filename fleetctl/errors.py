"""The one exception hierarchy of fleetctl and its stable exit codes.

Every expected failure is a FleetctlError. Only `fleetctl.cli.main` turns it into a one-line message
and an exit code; domain packages raise, they never print or exit.
"""

from __future__ import annotations

# Stable, documented exit codes (docs/exit-codes.md). Scripts and cron rely on them: never renumber.
EXIT_OK = 0
EXIT_WARNINGS = 1  # the command ran; it found warnings only
EXIT_FAILURES = 2  # the command ran; it found failures (failed hosts, failed checks)
EXIT_ERROR = 3  # fleetctl itself could not do the job: bad input, config, transport, Slurm, lab
EXIT_INTERRUPTED = 130


class FleetctlError(Exception):
    """Base of every error fleetctl reports to the user as one line."""

    kind = "error"
    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out

    def report_text(self) -> str:
        """What the user sees on stderr: `fleetctl: error: MESSAGE` and the hint on its own line."""
        return f"fleetctl: error: {self.message}" + (f"\n  hint: {self.hint}" if self.hint else "")


class UsageError(FleetctlError):
    """Bad command-line input: an option value, a node set, a missing argument."""

    kind = "usage"


class ConfigError(FleetctlError):
    """A site file (or other input file) that is missing, unparsable or fails the schema."""

    kind = "config"

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None,
                 hint: str | None = None):
        where = path or ""
        if key:
            where = f"{where}: {key}" if where else key
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.path = path
        self.key = key


class TransportError(FleetctlError):
    """The fan-out layer could not run at all (not a per-host failure, which is a result)."""

    kind = "transport"


class SlurmError(FleetctlError):
    """A Slurm command failed or returned something we cannot parse."""

    kind = "slurm"


class SlurmUnreachable(SlurmError):
    """slurmctld (or the configuration) cannot be reached at all: retrying node by node is useless."""


class LabError(FleetctlError):
    """The emulated cluster could not be built, inspected or torn down."""

    kind = "lab"


class DataError(FleetctlError):
    """A data file (HDF5 run, JSON report, kernel log) is missing, truncated or of the wrong version."""

    kind = "data"


class SnapshotError(FleetctlError):
    """A snapshot directory, manifest, request or registry entry that cannot be used as asked."""

    kind = "snapshot"


class RecoveryError(FleetctlError):
    """The in-job recovery cannot go on as asked: no control store, a replica that is missing or
    damaged, a plan that cannot be read, options that make no sense."""

    kind = "recovery"


class FailoverError(FleetctlError):
    """A drill that cannot run as asked (no harness, a real cluster without a maintenance
    reservation, a node without NICs), or a failover input that cannot be used."""

    kind = "failover"


class NotifyError(FleetctlError):
    """act's notify action could not deliver its webhook (no answer, an HTTP error)."""

    kind = "notify"


class RemediationError(FleetctlError):
    """A step of act's remediation ladder on a node (a GPU reset, the re-audit) did not succeed."""

    kind = "remediation"


class ResourceError(FleetctlError):
    """This machine ran out of what the job needs (memory): the input is fine, the machine too small
    for it, or fleetctl's way of doing it too costly (a bug worth a report)."""

    kind = "resource"


class InternalError(FleetctlError):
    """A failure inside fleetctl itself (a bug): reported as one line, the traceback with -vv."""

    kind = "internal"

    @classmethod
    def from_exception(cls, exc: BaseException) -> "InternalError":
        """The one line a bug is reported as, at every exit point (the CLI, the hooks' fast path)."""
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        return cls(f"internal error: {type(exc).__name__}: {first}",
                   hint="this is a fleetctl bug: run again with -vv for the traceback and report it")

