"""Small helpers shared by the integration tests that drive the lab's Slurm."""

from __future__ import annotations

import subprocess
import time


def wait_for(predicate, timeout=30.0, step=0.2):
    """Poll `predicate` until it returns something true; return that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not reached in time")


def scontrol(lab, *args) -> str:
    return subprocess.run(["scontrol", *args], env=lab.command_env(), capture_output=True, text=True,
                          timeout=30, check=True).stdout


def sbatch(lab, *args) -> str:
    """Submit a batch job (output discarded, not written into the work tree); return its id."""
    out = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return out.strip().split(";")[0]


class PrivateSlurmctld:
    """A second slurmctld of the lab's Slurm, on 127.0.0.1:6899 with its own state and no slurmd, to
    load a configuration file fleetctl wrote (topology.conf) into a real Slurm without touching the
    lab's controller. Its nodes are the lab's names; `scontrol(...)` asks it."""

    PORT = 6899

    def __init__(self, lab, directory, extra_lines: list[str], files: dict[str, str]):
        import socket
        from pathlib import Path

        self.lab, self.dir = lab, Path(directory)
        slurm = lab.state.get("slurm") or {}
        self.bindir = Path(slurm["bindir"]) if slurm.get("bindir") else None
        self.mount_ns = lab.state.get("mount_ns")
        shared = [line for line in Path(slurm["conf"]).read_text().splitlines()
                  if line.split("=", 1)[0] in ("AuthType", "CredType", "AuthInfo", "PluginDir")]
        (self.dir / "state").mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        lines = ["ClusterName=private", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={self.PORT}",
                 "SlurmUser=root", *shared, f"StateSaveLocation={self.dir / 'state'}",
                 f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}", f"SlurmctldLogFile={self.dir / 'slurmctld.log'}",
                 "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
                 "SelectTypeParameters=CR_Core", "MpiDefault=none", "MailProg=/bin/true", "JobAcctGatherType=jobacct_gather/none",
                 *extra_lines, f"NodeName={','.join(lab.nodes)} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN",
                 "PartitionName=p Nodes=ALL Default=YES State=UP"]
        self.conf = self.dir / "slurm.conf"
        self.conf.write_text("\n".join(lines) + "\n")
        for name, text in files.items():
            (self.dir / name).write_text(text)
        self.proc = None

    def _program(self, name):
        return str(self.bindir / name) if self.bindir else name

    def env(self):
        return dict(self.lab.command_env(), SLURM_CONF=str(self.conf))

    def __enter__(self):
        from fleetctl.lab import slurmroot

        cmd = slurmroot.enter(self.mount_ns) + [self._program("slurmctld"), "-D", "-i", "-f", str(self.conf)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_for(lambda: self.proc.poll() is not None or subprocess.run(
                [self._program("scontrol"), "ping"], env=self.env(), capture_output=True, text=True,
                timeout=10).stdout.count("UP"), timeout=20, step=0.3)
        except AssertionError:
            self.__exit__()
            raise
        if self.proc.poll() is not None:
            raise AssertionError("private slurmctld ended: " + self.log()[-2000:])
        return self

    def scontrol(self, *args) -> str:
        return subprocess.run([self._program("scontrol"), *args], env=self.env(), capture_output=True,
                              text=True, timeout=30, check=True).stdout

    def log(self) -> str:
        path = self.dir / "slurmctld.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
