"""Reading files a site file names, and resolving their paths: one rule for every path in it.

A relative path in a site file (slurm.conf, slurm.topology_conf, an SSH identity or known_hosts file)
is relative to the site file's directory, never to the working directory; `~` is expanded.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fleetctl.errors import ConfigError

MAX_SITE_BYTES = 32 * 1024 * 1024  # room for explicit links of a 10,000-node cluster, and a bound


def site_path(value: str, source: str) -> str:
    """`value` from the site file at `source` as a usable path: `~` expanded, a relative path joined
    to the site file's directory. Empty stays empty; a source like `<site>` (text, no file) leaves a
    relative path as it is."""
    if not value:
        return ""
    p = Path(value).expanduser()
    if not p.is_absolute() and source and not source.startswith("<"):
        p = Path(source).parent / p
    return str(p)


def read_bounded(path: Path, what: str, *, where: str = "", limit: int = MAX_SITE_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes, or ConfigError (never a FIFO or device that
    would block or never end)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat sees it.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"{what} is not a regular file", path=str(path))
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ConfigError(f"{what} larger than {limit // 2**20} MiB", path=str(path))
        return data.decode()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found{where}", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what}: {exc}", path=str(path)) from None
