"""Starts the lab's daemons (munged, slurmctld, one slurmd and one sshd per host) in the foreground
as children we can track by pid, each with its own config, key, socket and log under the lab dir."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from fleetctl.errors import LabError
from fleetctl.lab import slurmroot, system
from fleetctl.lab.topology import MGMT_GATEWAY, LabLayout


def spawn(cmd: list[str], log: Path, name: str, env: dict | None = None) -> dict:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    return system.proc_record(proc.pid, name)


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.2):
            return True
    except OSError:
        return False


def _require_running(records: list[dict], step: str, logs: dict[str, Path]) -> None:
    for rec in records:
        if not system.alive(rec["pid"], rec["start"]):
            log = logs.get(rec["name"])
            detail = system.tail(log) if log else ""
            raise LabError(f"{step}: {rec['name']} exited" + (f": {detail}" if detail else ""))


# ---------------------------------------------------------------- UTS namespaces (hostnames)
def create_uts(lab: Path, layout: LabLayout) -> dict[str, str]:
    """A UTS namespace per host, bind-mounted on a file, so that `hostname` says node3 there."""
    uts_dir = lab / "uts"
    uts_dir.mkdir(exist_ok=True)
    out = {}
    for host in layout.hosts:
        path = uts_dir / host.name
        path.touch()
        system.run(["unshare", f"--uts={path}", "hostname", host.name], f"hostname of {host.name}")
        out[host.name] = str(path)
    return out


def remove_uts(paths: list[str]) -> None:
    mounted = _mountpoints()
    for path in paths:
        if path in mounted:
            system.run(["umount", path], "unmount UTS namespace", check=False)


def _mountpoints() -> set[str]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    return {line.split()[4] for line in lines if len(line.split()) > 4}


def stale_uts(lab: Path) -> list[str]:
    return stale_mounts(lab / "uts")


def stale_mounts(directory: Path) -> list[str]:
    """Mount points under `directory` (namespaces bind-mounted on files, left by a killed session)."""
    prefix = str(directory) + "/"
    return sorted(p for p in _mountpoints() if p.startswith(prefix))


# ---------------------------------------------------------------- munge
def start_munge(lab: Path) -> tuple[dict, str]:
    d = lab / "munge"
    d.mkdir(mode=0o755, exist_ok=True)
    d.chmod(0o755)  # munged refuses a socket directory that is not world-executable
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = d / "munge.socket"
    log = lab / "logs" / "munged.log"
    rec = spawn(["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                 f"--pid-file={d / 'munged.pid'}", f"--log-file={log}", f"--seed-file={d / 'seed'}"],
                lab / "logs" / "munged.out", "munged")
    if not system.wait_for(lambda: sock.exists() or not system.alive(rec["pid"]), 10):
        raise LabError("munge: munged did not create its socket within 10 s")
    _require_running([rec], "munge", {"munged": log})
    return rec, str(sock)


# ---------------------------------------------------------------- Slurm
def _program(name: str, bindir: Path | None) -> str:
    """A Slurm program by name (this machine's), or the lab's wrapper of a Debian root's."""
    return str(bindir / name) if bindir else name


def start_slurmctld(lab: Path, conf: Path, bindir: Path | None = None, mount_ns: str | None = None) -> dict:
    log = lab / "logs" / "slurmctld.log"
    rec = spawn(slurmroot.enter(mount_ns) + [_program("slurmctld", bindir), "-D", "-i", "-f", str(conf)],
                lab / "logs" / "slurmctld.out", "slurmctld")
    if not system.wait_for(lambda: _port_open(MGMT_GATEWAY, 6817) or not system.alive(rec["pid"]), 15):
        raise LabError(f"slurm: slurmctld did not listen on {MGMT_GATEWAY}:6817 within 15 s")
    _require_running([rec], "slurm", {"slurmctld": log})
    return rec


def start_slurmds(lab: Path, conf: Path, layout: LabLayout, uts: dict[str, str], bindir: Path | None = None,
                  mount_ns: str | None = None) -> list[dict]:
    records = []
    for host in layout.hosts:
        cmd = system.nsenter(host.netns, uts[host.name], mount_ns) + [
            _program("slurmd", bindir), "-D", "-f", str(conf), "-N", host.name]
        records.append(spawn(cmd, lab / "logs" / f"slurmd.{host.name}.out", f"slurmd:{host.name}"))
    return records


def wait_nodes_idle(conf: Path, layout: LabLayout, records: list[dict], lab: Path, timeout: float = 20,
                    bindir: Path | None = None) -> None:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    names = {h.name for h in layout.hosts}
    states: dict[str, str] = {}

    def idle() -> bool:
        _require_running(records, "slurm", {r["name"]: lab / "logs" / f"slurmd.{r['name'][7:]}.log"
                                            for r in records})
        out = subprocess.run([_program("sinfo", bindir), "-h", "-N", "-o", "%N %t"], capture_output=True,
                             text=True,
                             env=env, timeout=10).stdout
        states.clear()
        for line in out.splitlines():
            node, _, state = line.partition(" ")
            states[node] = state.strip()
        return all(states.get(n) == "idle" for n in names)

    if not system.wait_for(idle, timeout, 0.1):
        bad = sorted(f"{n}={states.get(n, '?')}" for n in names if states.get(n) != "idle")
        raise LabError(f"slurm: nodes not idle after {timeout:.0f} s: {', '.join(bad)}")


# ---------------------------------------------------------------- sshd
_SSHD_CONF = """# Written by `fleetctl lab up`.
ListenAddress {address}
Port 22
HostKey {host_key}
HostCertificate {host_key}-cert.pub
PidFile none
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 200:30:400
MaxSessions 64
Subsystem sftp internal-sftp
{setenv}"""


def write_ssh_keys(lab: Path, layout: LabLayout, env: dict[str, str]) -> dict:
    """Keys, known_hosts and per-host sshd configs. `env` is set in every session (SLURM_CONF, so that
    srun and scontrol work on the nodes as on a real cluster).

    Each host key is also signed by a lab CA (a host certificate, as sites with an SSH CA have):
    `known_hosts` names every key, `known_hosts_ca` trusts the CA alone (`@cert-authority`)."""
    d = lab / "ssh"
    d.mkdir(mode=0o700, exist_ok=True)
    client = d / "id_ed25519"
    _keygen(client, "fleetctl-lab")
    ca = d / "ca"
    _keygen(ca, "fleetctl-lab-ca")
    (d / "authorized_keys").write_text(Path(f"{client}.pub").read_text())
    known = []
    for host in layout.hosts:
        hd = d / host.name
        hd.mkdir(exist_ok=True)
        key = hd / "ssh_host_ed25519_key"
        _keygen(key, host.name)
        system.run(["ssh-keygen", "-q", "-s", str(ca), "-I", host.name, "-h", "-n",
                    f"{host.name},{host.mgmt_address}", f"{key}.pub"], "ssh host certificates")
        kind, blob = Path(f"{key}.pub").read_text().split()[:2]
        known.append(f"{host.name},{host.mgmt_address} {kind} {blob}")
        # SHLVL=1: bash run by sshd skips ~/.bashrc only below level 2, and a session of the lab
        # must not depend on root's dotfiles (a pyenv shim's stale lock there hung every session)
        setenv = "SetEnv " + " ".join(f"{k}={v}" for k, v in {"SHLVL": "1", **env}.items()) + "\n"
        (hd / "sshd_config").write_text(_SSHD_CONF.format(
            address=host.mgmt_address, host_key=key, authorized=d / "authorized_keys", setenv=setenv))
    (d / "known_hosts").write_text("\n".join(known) + "\n")
    ca_kind, ca_blob = Path(f"{ca}.pub").read_text().split()[:2]
    (d / "known_hosts_ca").write_text(f"@cert-authority node*,10.250.0.* {ca_kind} {ca_blob} fleetctl-lab-ca\n")
    # For OpenSSH itself (the clush transport's hops, pdsh): node names to management addresses.
    config = [line for h in layout.hosts for line in (f"Host {h.name}", f"  HostName {h.mgmt_address}")]
    (d / "ssh_config").write_text("\n".join(config) + "\n")
    return {"identity_file": str(client), "known_hosts": str(d / "known_hosts"),
            "ssh_config": str(d / "ssh_config")}


def _keygen(path: Path, comment: str) -> None:
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], "ssh keys")


def start_sshds(lab: Path, layout: LabLayout, uts: dict[str, str], mount_ns: str | None = None) -> list[dict]:
    """One sshd per host; with a Debian root's Slurm, in the lab's mount namespace, so that a session's
    scontrol or srun is that Slurm's as on a real node."""
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    records = []
    for host in layout.hosts:
        cmd = system.nsenter(host.netns, uts[host.name], mount_ns) + [
            "/usr/sbin/sshd", "-D", "-e", "-f", str(lab / "ssh" / host.name / "sshd_config")]
        records.append(spawn(cmd, lab / "logs" / f"sshd.{host.name}.log", f"sshd:{host.name}"))
    return records


def wait_sshds(layout: LabLayout, records: list[dict], lab: Path, timeout: float = 10) -> None:
    logs = {r["name"]: lab / "logs" / f"sshd.{r['name'][5:]}.log" for r in records}
    pending = {h.mgmt_address for h in layout.hosts}

    def ready() -> bool:
        _require_running(records, "ssh", logs)
        for address in list(pending):
            if _port_open(address, 22):
                pending.discard(address)
        return not pending

    if not system.wait_for(ready, timeout):
        raise LabError(f"ssh: sshd not listening within {timeout:.0f} s on {', '.join(sorted(pending))}")


# ---------------------------------------------------------------- lldpd
def lldp_socket(lab: Path, name: str) -> Path:
    return lab / "lldp" / f"{name}.sock"


def start_lldpds(lab: Path, layout: LabLayout, uts: dict[str, str]) -> list[dict]:
    """One lldpd per namespace (hosts and switches), each with its own control socket (-u), its own
    configuration (-O: the element's name as system name, port ids as interface names, a 1 s
    transmit interval so that neighbours and cuts show within seconds) and no daemonizing (-d)."""
    d = lab / "lldp"
    d.mkdir(exist_ok=True)
    records = []
    elements = [(h.name, h.netns, uts.get(h.name)) for h in layout.hosts] + \
        [(r.id, r.netns, None) for r in layout.routers]
    for name, netns, uts_file in elements:
        conf = d / f"{name}.conf"
        conf.write_text(f"configure system hostname {name}\n"
                        "configure lldp portidsubtype ifname\n"
                        "configure lldp tx-interval 1\n")
        cmd = system.nsenter(netns, uts_file) + ["lldpd", "-d", "-u", str(lldp_socket(lab, name)),
                                                 "-O", str(conf)]
        records.append(spawn(cmd, lab / "logs" / f"lldpd.{name}.log", f"lldpd:{name}"))
    return records
