"""Installing the Slurm hooks: the wrapper script three times and its settings file, atomically.

    result = install_hooks(Path("/etc/slurm"), site_path="/etc/fleetctl/site.toml",
                           fleetctl_bin="/usr/local/bin/fleetctl", fail_closed=False,
                           log_path="/var/log/fleetctl-hooks.log")

The wrapper (hook.sh) reads the settings file as data and never runs it (docs/security.md).
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from fleetctl.atomic import write_atomic
from fleetctl.audit.hooks import HOOKS
from fleetctl.errors import UsageError

SETTINGS_FILE = "fleetctl-hooks.env"
MAX_SETTING = 4096  # characters of one value: PATH_MAX; the wrapper reads at most 64 KiB of the file


@dataclass
class Installed:
    directory: Path
    wrappers: dict[str, Path]  # hook -> its wrapper
    settings: Path
    site_path: str

    def to_dict(self) -> dict:
        return {"installed": [str(p) for p in self.wrappers.values()], "env": str(self.settings),
                "site": self.site_path}

    def slurm_conf(self) -> str:
        """The slurm.conf lines that run the installed wrappers."""
        w = self.wrappers
        return (f"Prolog={w['prolog']}\nEpilog={w['epilog']}\nPrologFlags=Alloc\n"
                f"HealthCheckProgram={w['healthcheck']}\nHealthCheckInterval=300")


def running_fleetctl(argv0: str | None = None) -> str:
    """The fleetctl that is running, for the hooks to run too: the node bundle (a .pyz zipapp) or the
    `fleetctl` script by the path it was started with; else the first `fleetctl` on PATH, else the
    one beside this Python (a venv's bin/)."""
    started = Path(argv0 if argv0 is not None else sys.argv[0])
    if started.is_file() and (started.name == "fleetctl" or zipfile.is_zipfile(started)):
        return str(started.resolve())
    return shutil.which("fleetctl") or str(Path(sys.executable).parent / "fleetctl")


# The keys the wrapper (hook.sh) reads from its settings file; it ignores any other.
SETTINGS_KEYS = ("FLEETCTL", "FLEETCTL_SITE", "FLEETCTL_FAIL_CLOSED", "FLEETCTL_HOOK_LOG", "FLEETCTL_HOOK_STATE_DIR",
                 "FLEETCTL_PROLOG_BUDGET", "FLEETCTL_EPILOG_BUDGET", "FLEETCTL_HEALTHCHECK_BUDGET")


def settings_text(settings: dict[str, str]) -> str:
    """The wrapper's settings file (fleetctl-hooks.env): KEY='VALUE' lines, or UsageError.

    The wrapper reads the file literally and never runs it; the quotes keep it harmless even for a
    shell that sources it, so a value may hold no quote, backslash, newline or other control character.
    """
    lines = ["# written by fleetctl hook install; read (never run) by the fleetctl hook wrappers"]
    for key, value in settings.items():
        if key not in SETTINGS_KEYS:
            raise AssertionError(f"unknown hook setting {key}")
        bad = next((ch for ch in value if ch in "'\"\\" or ord(ch) < 32 or ord(ch) == 127), None)
        if not value or bad is not None or len(value) > MAX_SETTING:
            why = "is empty" if not value else (f"contains {bad!r}" if bad is not None
                                                else f"is longer than {MAX_SETTING} characters")
            value = value[:80] + ("..." if len(value) > 80 else "")
            raise UsageError(f"cannot install hooks: {key} {value!r} {why} (quotes, backslashes and "
                             "control characters cannot be written to the settings file)")
        lines.append(f"{key}='{value}'")
    return "\n".join(lines) + "\n"


def install_hooks(directory: Path, *, site_path: str, fleetctl_bin: str, fail_closed: bool,
                  log_path: str) -> Installed:
    """Write the settings file and the three wrappers into `directory` (created if missing).

    Every value is validated before anything is written; each file is written atomically, so there
    is never a half-written settings file or wrapper beside live ones, nor one through a planted link."""
    source = resources.files("fleetctl.audit").joinpath("hook.sh").read_text()
    text = settings_text({"FLEETCTL": fleetctl_bin, "FLEETCTL_SITE": site_path,
                          "FLEETCTL_FAIL_CLOSED": str(int(fail_closed)), "FLEETCTL_HOOK_LOG": log_path})
    wrappers = {name: directory / f"fleetctl-{name}" for name in HOOKS}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / SETTINGS_FILE, text)
        for path in wrappers.values():
            write_atomic(path, source, mode=0o755)
    except OSError as exc:
        raise UsageError(f"cannot install hooks into {directory}: {exc.strerror or exc}") from None
    return Installed(directory, wrappers, directory / SETTINGS_FILE, site_path)
