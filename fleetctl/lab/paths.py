"""Where the lab keeps its state. Light on imports: the CLI reads it at every start."""

from __future__ import annotations

import json
import os
from pathlib import Path

DEFAULT_LAB_DIR = "/var/lib/fleetctl/lab"


def lab_dir() -> Path:
    return Path(os.environ.get("FLEETCTL_LAB_DIR") or DEFAULT_LAB_DIR)


def state_file() -> Path:
    return lab_dir() / "state.json"


def site_file() -> Path:
    return lab_dir() / "site.toml"


def active_site() -> Path | None:
    """The lab's site file when a lab is up, else None."""
    try:
        state = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    if state.get("status") == "up" and site_file().is_file():
        return site_file()
    return None
