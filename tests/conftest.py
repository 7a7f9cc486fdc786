"""Shared fixtures. `lab`: one emulated cluster per test session, always torn down.

Tests that use it are marked `@pytest.mark.lab`. The session lab is the default size plus simulated
GPUs and clock skew (4 hosts x 2 NICs, 2 leaves, 2 spines, 4 GPUs per host); override the size with
FLEETCTL_TEST_LAB_HOSTS / _NICS / _LEAVES / _SPINES / _GPUS. FLEETCTL_TEST_SLURM chooses its Slurm:
system (default), trixie or 24.11 (Debian 13's), sid (Debian unstable's, the newest); the Slurm-facing
tests are marked `slurm` too (`-m slurm` runs just them). Two pytest runs on one machine take turns
(flock on /run/fleetctl-lab.lock). The lab lives in FLEETCTL_LAB_DIR (default /var/lib/fleetctl/lab).

    def test_something(lab):          # lab: fleetctl.lab.session.Lab
        site = lab.cluster               # the lab's Cluster (load_site of lab.site_file)
        lab.run_in("node2", ["hostname"])
        subprocess.run(["srun", "-N2", "hostname"], env=lab.command_env())
"""

from __future__ import annotations

import os

import pytest


def _lab_params():
    from fleetctl.lab.topology import LabParams

    env = os.environ.get
    return LabParams(hosts=int(env("FLEETCTL_TEST_LAB_HOSTS", "4")),
                     nics_per_host=int(env("FLEETCTL_TEST_LAB_NICS", "2")),
                     leaves=int(env("FLEETCTL_TEST_LAB_LEAVES", "2")),
                     spines=int(env("FLEETCTL_TEST_LAB_SPINES", "2")),
                     gpus_per_host=int(env("FLEETCTL_TEST_LAB_GPUS", "4")),
                     clock_skew=True, slurm_from=_slurm_from())


def _slurm_from() -> str:
    choice = os.environ.get("FLEETCTL_TEST_SLURM", "") or "system"
    return "trixie" if choice == "24.11" else choice


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: talks to the lab's Slurm (run on every Slurm version)")
    config.addinivalue_line("markers", "system_slurm: needs this machine's Slurm (deselected on a Debian "
                            "root's)")
    config.addinivalue_line("markers", "mesh16: needs the 16-host lab (scripts/test runs them with "
                            "FLEETCTL_TEST_LAB_HOSTS=16 FLEETCTL_TEST_LAB_LEAVES=4 -m mesh16)")
    config.addinivalue_line("markers", "lens: needs the 8-host lab (scripts/test runs them with "
                            "FLEETCTL_TEST_LAB_HOSTS=8 -m lens)")
    config.addinivalue_line("markers", "lab8: needs 5 to 8 lab hosts (run in the 8-host lens run, "
                            "-m 'lens or lab8')")


def pytest_collection_modifyitems(config, items):
    """Deselect (not skip) what the session lab cannot run: the 16-host mesh tests and the 8-host
    lens tests in a smaller lab (scripts/test runs them in their own pytest runs), and tests marked
    `system_slurm` on a Debian root's Slurm."""
    hosts = int(os.environ.get("FLEETCTL_TEST_LAB_HOSTS", "4"))
    big_lab = hosts >= 16
    system_slurm = _slurm_from() == "system"
    keep = [item for item in items
            if (big_lab or item.get_closest_marker("mesh16") is None)
            and (hosts >= 8 or (item.get_closest_marker("lens") is None
                                and item.get_closest_marker("lab8") is None))
            and (system_slurm or item.get_closest_marker("system_slurm") is None)]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def pytest_report_header(config):
    return f"lab Slurm: {_slurm_from()} (FLEETCTL_TEST_SLURM)"


@pytest.fixture(scope="session")
def lab():
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("lab tests need root (network namespaces); CI must run them as root")
        pytest.skip("lab tests need root (network namespaces, Slurm, sshd)")
    from fleetctl.lab.session import LabSession

    with LabSession(_lab_params()) as running:
        # A Debian root's Slurm: its client commands first in PATH for this process too (the CLI backend
        # and the srun transport, called in-process, find scontrol and srun by name).
        saved = {key: os.environ.get(key) for key in ("PATH", "FLEETCTL_SITE")}
        if "PATH" in running.env:
            os.environ["PATH"] = running.env["PATH"]
        # The lab is an explicit choice, as `eval "$(fleetctl lab env)"` makes it in a shell: the CLI
        # called in-process by lab tests uses its site file through FLEETCTL_SITE.
        os.environ["FLEETCTL_SITE"] = str(running.site_file)
        try:
            yield running
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
