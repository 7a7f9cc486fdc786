"""spank_fleetctl.so loaded by the lab's real Slurm (srun, sbatch, slurmstepd, Prolog): the options,
the admin's plugstack arguments, the tasks' environment and the Prolog's SPANK_FLEET_*.

On every Slurm the lab runs (marker `slurm`): on this machine's (22.05) the plugin built against
/usr/include/slurm, on a Debian root's (24.11, 26.05) the one built against that root's headers
(fleetctl.lab.spankbuild); a plugin of another release would be refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleetctl.lab import slurmconf, spankbuild

from labutil import sbatch, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
ADMIN_LIB = str(slurmconf.NCCL_PLUGIN_DIR / "libnccl-net-fleet.so")


def _plugin_for_the_lab(lab) -> Path:
    """Build (make: only what changed) the plugin for the lab's Slurm and return it."""
    root = lab.state["slurm"].get("root")
    if root:
        return spankbuild.build(Path(root))
    subprocess.run(["make", "-s", "-C", str(REPO / "spank_plugin")], check=True, timeout=300)
    return slurmconf.SPANK_PLUGIN


@pytest.fixture
def plugstack(lab):
    """Write the lab's plugstack.conf with the given plugstack arguments (srun and slurmstepd read
    it at every start); restore the lab's own afterwards."""
    plugin = _plugin_for_the_lab(lab)
    path = Path(lab.lab_dir) / "plugstack.conf"
    saved = path.read_text() if path.exists() else None

    def configure(control: str = "optional", **args: str) -> None:
        path.write_text(slurmconf.plugstack_line(control, plugin, **args))

    configure()
    yield configure
    if saved is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(saved)


def srun(lab, *args, env=None):
    full = dict(lab.command_env(), **(env or {}))
    return subprocess.run(["srun", "-N1", "-w", "node1", *args], env=full, capture_output=True,
                          text=True, timeout=60)


def task_env(proc) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    return dict(line.partition("=")[::2] for line in proc.stdout.splitlines() if "=" in line)


def fleet_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "spank_fleetctl" in line]


def test_failover_auto_sets_the_admins_plugin(lab, plugstack):
    env = task_env(srun(lab, "--fleet-failover=auto", "env"))
    assert env["NCCL_NET_PLUGIN"] == ADMIN_LIB
    assert env["NCCL_NET"] == "fleet"
    assert "FLEET_NET_IFACES" not in env


def test_admin_default_applies_without_the_option(lab, plugstack):
    plugstack(ifaces="eth0,eth1")
    env = task_env(srun(lab, "env"))
    assert env["NCCL_NET_PLUGIN"] == ADMIN_LIB and env["FLEET_NET_IFACES"] == "eth0,eth1"
    plugstack(default="off")
    env = task_env(srun(lab, "env"))
    assert "NCCL_NET_PLUGIN" not in env and "NCCL_NET" not in env


def test_failover_off_sets_nothing(lab, plugstack):
    env = task_env(srun(lab, "--fleet-failover=off", "env"))
    assert "NCCL_NET_PLUGIN" not in env and "NCCL_NET" not in env


def test_users_own_plugin_is_overridden(lab, plugstack):
    env = task_env(srun(lab, "--fleet-failover=auto", "env",
                        env={"NCCL_NET_PLUGIN": "/tmp/evil.so", "NCCL_NET": "Socket"}))
    assert env["NCCL_NET_PLUGIN"] == ADMIN_LIB and env["NCCL_NET"] == "fleet"


def test_bogus_value_is_one_clear_line(lab, plugstack):
    proc = srun(lab, "--fleet-failover=bogus", "true")
    assert proc.returncode != 0
    lines = fleet_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "--fleet-failover=bogus" in lines[0] and "expected auto or off" in lines[0]


def test_off_refused_when_admin_disallows(lab, plugstack):
    plugstack(allow_off="no")
    proc = srun(lab, "--fleet-failover=off", "true")
    assert proc.returncode != 0
    lines = fleet_lines(proc.stderr)
    assert len(lines) == 1 and "does not allow turning failover off" in lines[0], proc.stderr
    assert srun(lab, "--fleet-failover=auto", "true").returncode == 0


def test_unknown_plugstack_key_is_fatal_on_a_required_line(lab, plugstack):
    plugstack("required", colour="blue")
    proc = srun(lab, "true")
    assert proc.returncode != 0
    assert any("colour" in l and "unknown key" in l for l in fleet_lines(proc.stderr)), proc.stderr


def test_unknown_plugstack_key_on_an_optional_line_leaves_the_plugin_inert(lab, plugstack):
    plugstack(colour="blue")
    proc = srun(lab, "env")
    assert any("colour" in l and "unknown key" in l for l in fleet_lines(proc.stderr)), proc.stderr
    env = task_env(proc)
    assert "NCCL_NET_PLUGIN" not in env and "NCCL_NET" not in env


def test_snapshot_must_be_absolute(lab, plugstack):
    proc = srun(lab, "--fleet-snapshot=relative/dir", "true")
    assert proc.returncode != 0
    assert any("not an absolute path" in l for l in fleet_lines(proc.stderr)), proc.stderr
    env = task_env(srun(lab, "--fleet-snapshot=/var/tmp/snap", "env"))
    assert env["FLEET_SNAPSHOT_DIR"] == "/var/tmp/snap"


@pytest.fixture
def prolog_capture(lab, tmp_path):
    """A Prolog (dropped into the lab's prolog.d) that records the SPANK_FLEET_* it is given."""
    out = tmp_path / "prolog.env"
    hook = Path(lab.lab_dir) / "hooks" / "prolog.d" / "40-spank-capture"
    hook.write_text(f"#!/bin/sh\n{{ echo \"job=$SLURM_JOB_ID\"; env | grep '^SPANK_FLEET_'; }} >> {out}\n"
                    "exit 0\n")
    hook.chmod(0o755)
    yield out
    hook.unlink(missing_ok=True)


def prolog_env(out: Path, job: str) -> dict[str, str]:
    """The SPANK_FLEET_* the Prolog saw for `job`."""
    records, current = {}, None
    for line in out.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "job":
            current = records.setdefault(value, {})
        elif current is not None:
            current[key] = value
    return records.get(job, {})


def test_prolog_sees_the_choices(lab, plugstack, prolog_capture):
    proc = srun(lab, "--fleet-failover=off", "--fleet-lens", "--fleet-snapshot=/var/tmp/snap",
                "sh", "-c", "echo SLURM_JOB_ID=$SLURM_JOB_ID")
    job = task_env(proc)["SLURM_JOB_ID"]
    seen = prolog_env(prolog_capture, job)
    assert seen == {"SPANK_FLEET_FAILOVER": "off", "SPANK_FLEET_LENS": "1",
                    "SPANK_FLEET_SNAPSHOT": "/var/tmp/snap"}, prolog_capture.read_text()


def test_sbatch_job_gets_the_plugin_and_prolog_the_choice(lab, plugstack, prolog_capture, tmp_path):
    out = tmp_path / "batch.env"
    job = sbatch(lab, "-w", "node2", "-N1", "--fleet-failover=auto", "--fleet-lens",
                 "--wrap", f"env > {out}")
    wait_for(lambda: out.exists() and "NCCL_NET=" in out.read_text(), timeout=60)
    env = dict(line.partition("=")[::2] for line in out.read_text().splitlines() if "=" in line)
    assert env["NCCL_NET_PLUGIN"] == ADMIN_LIB and env["NCCL_NET"] == "fleet"
    assert prolog_env(prolog_capture, job) == {"SPANK_FLEET_FAILOVER": "auto", "SPANK_FLEET_LENS": "1"}


def test_env_file_from_failover_plan_replaces_the_plugin_variables(lab, plugstack, tmp_path):
    """The IB route: `fleetctl failover plan --write-env` output named by env_file=; the tasks get
    exactly its variables, and a user's own NCCL_NET_PLUGIN/NCCL_NET are removed."""
    env_file = tmp_path / "failover.env"
    env_file.write_text("# fleetctl failover plan\nNCCL_NET_FORCE_MERGE=mlx5_0,mlx5_1\n"
                        "NCCL_IB_RESILIENCY_PORT_FAILOVER=1\nNCCL_IB_RESILIENCY_PORT_RECOVERY=1\n")
    env_file.chmod(0o644)
    plugstack("required", env_file=str(env_file), required="yes")
    env = task_env(srun(lab, "env", env={"NCCL_NET_PLUGIN": "/home/user/evil.so", "NCCL_NET": "evil"}))
    assert env["NCCL_NET_FORCE_MERGE"] == "mlx5_0,mlx5_1"
    assert env["NCCL_IB_RESILIENCY_PORT_FAILOVER"] == "1" and env["NCCL_IB_RESILIENCY_PORT_RECOVERY"] == "1"
    assert "NCCL_NET_PLUGIN" not in env and "NCCL_NET" not in env
    # --fleet-failover=off: nothing from the file
    env = task_env(srun(lab, "--fleet-failover=off", "env"))
    assert "NCCL_IB_RESILIENCY_PORT_FAILOVER" not in env
    # a file anybody may write is refused, and with required=yes the job with it
    env_file.chmod(0o666)
    proc = srun(lab, "env")
    # slurmstepd refuses to start the task (srun of Slurm 22.05 may still exit 0 after a failed launch)
    assert "NCCL_" not in proc.stdout and "launch failed" in proc.stderr, proc
    assert any("env_file=" in line and "writable by nobody else" in line for line in fleet_lines(proc.stderr))
