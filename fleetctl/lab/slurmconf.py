"""The lab's slurm.conf and its hook dispatchers, for Slurm 22.05 (Debian 12), 24.11 (Debian 13) and
the newest Debian ships (sid); docs/slurm-versions.md lists what differs."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from fleetctl.lab import system
from fleetctl.lab.topology import MGMT_GATEWAY, LabLayout

PARTITION = "gpu"
HOOKS = ("prolog", "epilog", "healthcheck")

# A hook of Slurm runs every executable of its `.d` directory in name order and exits with the first
# non-zero status, so fleetctl's hooks are installed by dropping a file there (no restart needed).
_DISPATCHER = """#!/bin/sh
# fleetctl lab: {hook} dispatcher. Runs every executable in {dir} in name order.
for f in {dir}/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    "$f" "$@" || exit $?
done
exit 0
"""


def _program(name: str, bindir: Path | None) -> str:
    return str(bindir / name) if bindir else name


def slurm_version(bindir: Path | None = None) -> tuple[int, int]:
    out = system.run([_program("slurmctld", bindir), "-V"], "slurm version").stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def node_hardware(bindir: Path | None = None) -> str:
    """CPU layout as `slurmd -C` reports it: node lines must match it or slurmd is refused."""
    out = system.run([_program("slurmd", bindir), "-C"], "slurm hardware").stdout
    keys = {}
    for word in out.split():
        key, _, value = word.partition("=")
        keys[key] = value
    cpus = keys.get("CPUs", "1")
    layout = " ".join(f"{k}={keys[k]}" for k in ("Boards", "SocketsPerBoard", "CoresPerSocket",
                                                  "ThreadsPerCore") if k in keys)
    # A small RealMemory: every emulated node shares this machine's memory.
    return f"CPUs={cpus} {layout} RealMemory=1000"


def write_hooks(lab: Path) -> dict[str, str]:
    hooks = lab / "hooks"
    paths = {}
    for hook in HOOKS:
        directory = hooks / f"{hook}.d"
        directory.mkdir(parents=True, exist_ok=True)
        script = hooks / hook
        script.write_text(_DISPATCHER.format(hook=hook, dir=directory))
        script.chmod(0o755)
        paths[hook] = str(script)
    # RebootProgram: the lab's emulated reboot (fleetctl.lab.reboot), with the lab dir it belongs to.
    reboot = hooks / "reboot"
    reboot.write_text(f"#!/bin/sh\nexport FLEETCTL_LAB_DIR={shlex.quote(str(lab))}\n"
                      f"exec {shlex.quote(sys.executable)} -m fleetctl.lab.reboot\n")
    reboot.chmod(0o755)
    paths["reboot"] = str(reboot)
    return paths


REPO = Path(__file__).resolve().parents[2]
SPANK_PLUGIN = REPO / "spank_plugin" / "build" / "spank_fleetctl.so"
NCCL_PLUGIN_DIR = REPO / "nccl_plugin" / "build"


def plugstack_line(control: str = "optional", plugin: Path = SPANK_PLUGIN, **args: str) -> str:
    """The lab's line for spank_fleetctl.so (`plugin`: the build for the lab's Slurm; this machine's,
    built by scripts/install, by default), with the repo's NCCL plugin build as the admin's plugin_dir;
    extra plugstack arguments as given."""
    words = [f"plugin_dir={NCCL_PLUGIN_DIR}"] + [f"{k}={v}" for k, v in args.items()]
    return f"{control} {plugin} {' '.join(words)}\n"


def write_plugstack(lab: Path, plugin: Path | None = SPANK_PLUGIN) -> Path:
    """The lab's own plugstack.conf: spank_fleetctl.so when its build for the lab's Slurm exists (a
    plugin built for another Slurm release would be refused). srun and slurmstepd read it at every
    start, so tests may rewrite it without a restart."""
    text = "# fleetctl lab: SPANK plugins of the lab's Slurm\n"
    if plugin is not None and plugin.is_file():
        text += plugstack_line(plugin=plugin)
    path = lab / "plugstack.conf"
    path.write_text(text)
    return path


def write_conf(lab: Path, layout: LabLayout, controller_host: str, munge_socket: str,
               version: tuple[int, int], *, bindir: Path | None = None,
               plugin_dir: Path | None = None, spank_plugin: Path | None = SPANK_PLUGIN) -> Path:
    """slurm.conf (and cgroup.conf from 24.05). `bindir`/`plugin_dir`: a Debian root's Slurm, whose
    plugins are not at the compiled-in path (that is this machine's Slurm's). `spank_plugin`: the
    build of spank_fleetctl.so for the lab's Slurm (loaded when it exists)."""
    hooks = write_hooks(lab)
    slurm, logs = _make_dirs(lab, layout)
    hardware = node_hardware(bindir)
    lines = _controller_lines(controller_host, munge_socket, slurm, logs, hooks)
    if plugin_dir:
        lines.append(f"PluginDir={plugin_dir}")  # the root's own plugins
    lines.append(f"PlugStackConfig={write_plugstack(lab, spank_plugin)}")
    if version >= (25, 11):
        # Expedited requeue (25.11): a job submitted with --requeue=expedite starts again at once after
        # a requeue (no credential-lifetime wait), at the highest priority: spares swap uses it.
        lines.append("SlurmctldParameters=enable_expedited_requeue")
    for host in layout.hosts:
        lines.append(f"NodeName={host.name} NodeAddr={host.mgmt_address} NodeHostname={host.name} "
                     f"{hardware} Features=lab,{host.leaf} State=UNKNOWN")
    nodes = ",".join(h.name for h in layout.hosts)
    lines.append(f"PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP")
    conf = lab / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    if version >= (24, 5):
        # From 24.05 slurmd initialises a cgroup plugin unless told not to; the lab has no cgroups
        # of its own (all nodes share this machine's hierarchy).
        (lab / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    return conf


def _make_dirs(lab: Path, layout: LabLayout) -> tuple[Path, Path]:
    """The state and spool directories (slurm/) and the log directory (logs/)."""
    slurm = lab / "slurm"
    (slurm / "state").mkdir(parents=True, exist_ok=True)
    for host in layout.hosts:
        (slurm / "spool" / host.name).mkdir(parents=True, exist_ok=True)
    logs = lab / "logs"
    logs.mkdir(exist_ok=True)
    return slurm, logs


def _controller_lines(controller_host: str, munge_socket: str, slurm: Path, logs: Path,
                      hooks: dict[str, str]) -> list[str]:
    """The lines that are the same for every lab: controller, authentication, paths, plugins, hooks
    and timeouts."""
    return [
        "# Written by `fleetctl lab up`; removed by `fleetctl lab down`.",
        "ClusterName=lab",
        f"SlurmctldHost={controller_host}({MGMT_GATEWAY})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire also sets how long a requeued job waits before it may start again (default
        # 120 s): 20 s lets `fleetctl spares swap` bring a job back within the loop's 60 s goal.
        f"AuthInfo=socket={munge_socket},cred_expire=20",
        f"StateSaveLocation={slurm / 'state'}",
        f"SlurmdSpoolDir={slurm / 'spool' / '%n'}",
        f"SlurmctldPidFile={slurm / 'slurmctld.pid'}",
        f"SlurmdPidFile={slurm / 'slurmd.%n.pid'}",
        f"SlurmctldLogFile={logs / 'slurmctld.log'}",
        f"SlurmdLogFile={logs / 'slurmd.%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "PrologFlags=Alloc",
        "PrologEpilogTimeout=120",
        f"Prolog={hooks['prolog']}",
        f"Epilog={hooks['epilog']}",
        f"HealthCheckProgram={hooks['healthcheck']}",
        f"RebootProgram={hooks['reboot']}",
        "ResumeTimeout=60",  # a reboot not back by then: the node is down (Slurm's default)
        "HealthCheckInterval=300",
        "SlurmdTimeout=60",
        "KillWait=5",
        "MinJobAge=60",
        "InactiveLimit=0",
    ]
