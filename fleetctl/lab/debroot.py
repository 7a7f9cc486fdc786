"""A throw-away Debian system on top of a cached debootstrap root (fleetctl.lab.slurmroot): an overlay
mount whose writes go to a scratch directory, with /proc, /dev and /sys, entered by chroot. The
package tests install fleetctl's .debs there with apt and run them as a node would; the cached root
itself never changes.

    with overlay_root(root, workdir) as system:
        system.run("apt-get", "update")
        system.files()            # every path in it, for a before/after comparison
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleetctl.errors import LabError

REPO = Path(__file__).resolve().parents[2]
# A one-node cluster for the installed fleetctl: node n1 in class cpu, the system's slurm.conf.
ONE_NODE_SITE = ('[cluster]\nname = "debroot"\n\n[slurm]\nconf = "/etc/slurm/slurm.conf"\n\n'
                 '[[node_classes]]\nname = "cpu"\nnodes = "n1"\n')
ONE_NODE_SLURM_CONF = ("ClusterName=debroot\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
                       "PartitionName=p Nodes=n1 Default=YES\n")
BASE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/root",
            "DEBIAN_FRONTEND": "noninteractive"}
PSEUDO = ("proc", "dev", "sys")


class OverlaySystem:
    def __init__(self, merged: Path):
        self.merged = merged

    def path(self, inside: str) -> Path:
        return self.merged / inside.lstrip("/")

    def run(self, *argv: str, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """argv inside the system, with a clean environment (BASE_ENV and `env`); never a shell."""
        pairs = [f"{k}={v}" for k, v in {**BASE_ENV, **(env or {})}.items()]
        return subprocess.run(["chroot", str(self.merged), "env", "-i", *pairs, *argv],
                              capture_output=True, text=True, timeout=timeout)

    def files(self) -> set[str]:
        """Every path in the system but /proc, /dev and /sys (directories end in /)."""
        found = set()
        for dirpath, dirnames, filenames in os.walk(self.merged):
            rel = os.path.relpath(dirpath, self.merged)
            if rel in PSEUDO:
                dirnames.clear()
                continue
            found.update(os.path.normpath(os.path.join(rel, n)) + "/" for n in dirnames)
            found.update(os.path.normpath(os.path.join(rel, n)) for n in filenames)
        return found


def _mount(argv: list[str]) -> None:
    result = subprocess.run(["mount", *argv], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise LabError(f"mount {' '.join(argv)}: {result.stderr.strip()[:300]}")


@contextmanager
def overlay_root(root: Path, workdir: Path) -> Iterator[OverlaySystem]:
    """The overlay of `root` with its writes in `workdir` (which must be empty or absent), unmounted
    on the way out however the block ends."""
    upper, scratch, merged = workdir / "upper", workdir / "work", workdir / "merged"
    for d in (upper, scratch, merged):
        d.mkdir(parents=True)
    mounted: list[Path] = []
    try:
        _mount(["-t", "overlay", "overlay", "-o", f"lowerdir={root},upperdir={upper},workdir={scratch}",
                str(merged)])
        mounted.append(merged)
        _mount(["-t", "proc", "proc", str(merged / "proc")])
        mounted.append(merged / "proc")
        for name in ("dev", "sys"):
            _mount(["--bind", f"/{name}", str(merged / name)])
            mounted.append(merged / name)
        (merged / "etc/resolv.conf").write_text(Path("/etc/resolv.conf").read_text())  # apt's mirror
        yield OverlaySystem(merged)
    finally:
        for target in reversed(mounted):
            if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)


def install_debs(system: OverlaySystem, debs: list[Path]) -> None:
    """apt installs `debs` in the system with their dependencies from its Debian archive."""
    inbox = system.path("/tmp/debs")
    inbox.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        (inbox / deb.name).write_bytes(deb.read_bytes())
    for argv in (["apt-get", "update", "-q"],
                 ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "Dpkg::Use-Pty=0",
                  *(f"/tmp/debs/{d.name}" for d in debs)]):
        result = system.run(*argv, timeout=900)
        if result.returncode != 0:
            raise LabError(f"{' '.join(argv[:2])} in {system.merged}: "
                           f"{(result.stdout[-1500:] + result.stderr[-1500:]).strip()}")


def build_packages(out: Path, slurm_root: Path, python: str) -> tuple[list[Path], Path]:
    """`scripts/package --deb` with `python` (the venv's) against `slurm_root`'s Slurm headers:
    (fleetctl-slurm-plugins and fleetctl .debs, debug symbols left out; the node bundle)."""
    result = subprocess.run([str(REPO / "scripts" / "package"), "--out", str(out), "--deb", "--slurm-root",
                             str(slurm_root)], capture_output=True, text=True, timeout=900,
                            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "PYTHON": python})
    if result.returncode != 0:
        raise LabError(f"scripts/package --deb: {(result.stdout[-1000:] + result.stderr[-1000:]).strip()}")
    debs = sorted(p for p in out.glob("*.deb") if "dbgsym" not in p.name)
    return debs, next(out.glob("*.pyz"))


def add_one_node_cluster(system: OverlaySystem) -> None:
    """/etc/fleetctl/site.toml and /etc/slurm/slurm.conf of a one-node cluster (node n1)."""
    system.path("/etc/fleetctl").mkdir(exist_ok=True)
    system.path("/etc/fleetctl/site.toml").write_text(ONE_NODE_SITE)
    system.path("/etc/slurm/slurm.conf").write_text(ONE_NODE_SLURM_CONF)
