"""What the lab subcommands share: the session guard and how a lab's Slurm is described."""

from __future__ import annotations

from fleetctl.errors import LabError


def refuse_if_session_busy() -> None:
    from fleetctl.lab.state import SESSION_LOCK, session_busy

    if session_busy():
        raise LabError(f"a test session holds the lab ({SESSION_LOCK})",
                       hint="wait for that pytest run to finish")


def slurm_from(slurm: dict) -> str:
    if slurm.get("root"):
        return f"Debian {slurm.get('from')} root {slurm['root']}"
    return "this machine's"


def site_path():
    from fleetctl.lab.paths import site_file

    return site_file()
