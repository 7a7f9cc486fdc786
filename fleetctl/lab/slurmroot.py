"""A newer Slurm for the lab, from a Debian root made with debootstrap (see docs/slurm-versions.md).

`--slurm system` runs this machine's Slurm. `--slurm trixie` (Debian 13, Slurm 24.11) and `--slurm sid`
(Debian unstable, the newest Slurm Debian ships) run the Slurm of a cached Debian root
(/var/cache/fleetctl/roots/<suite>, built when absent, reused when complete: the stamp file is written
last and the finished tree is renamed into place).

How the root's binaries run here: not chrooted, but through the root's own dynamic loader with the root's
library directories (`ld-linux --library-path ROOT/lib... ROOT/usr/sbin/slurmd`). Every path a daemon,
a hook or a job sees is then this machine's (lab dir, /tmp, the repository, Python), so Prolog, Epilog,
HealthCheck and job steps run this machine's fleetctl exactly as with the system Slurm. What must come
from the root is found by path: plugins (PluginDir in slurm.conf) and the programs Slurm runs by their
compiled-in paths: slurmd execs /usr/sbin/slurmstepd, and hooks run `scontrol` from /usr/bin. For those,
the lab's daemons and sshds run in one private mount namespace (bind-mounted on LAB/ns/mnt) in which
small wrapper scripts are bind-mounted over /usr/sbin/slurm* and /usr/bin/s* of this machine; nothing
outside that namespace changes. The same wrappers, in LAB/slurm-bin, go first in PATH for client use
(`fleetctl lab env`).
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from fleetctl.errors import LabError
from fleetctl.lab import system

# --slurm choice -> Debian suite of the root (None: this machine's Slurm).
CHOICES = {"system": None, "trixie": "trixie", "sid": "sid", "24.11": "trixie"}
DAEMONS = ("slurmctld", "slurmd", "slurmstepd")
CLIENTS = ("scontrol", "sinfo", "squeue", "srun", "sbatch", "scancel", "sacct", "salloc", "sattach",
           "sstat", "sprio", "sdiag", "sshare", "strigger")
PACKAGES = ("slurmd", "slurmctld", "slurm-client", "libslurm-dev")
# libslurm-dev: the root's slurm/*.h, against which the lab's SPANK plugin is built for that Slurm.
HEADERS_PACKAGE = "libslurm-dev"
SPANK_HEADER = "usr/include/slurm/spank.h"
STAMP = ".fleetctl-root-complete"
DEFAULT_ROOTS = "/var/cache/fleetctl/roots"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MULTIARCH = "usr/lib/x86_64-linux-gnu"
LOADER = f"{MULTIARCH}/ld-linux-x86-64.so.2"
BUILD_TIMEOUT = 1200.0


def suite_of(choice: str) -> str | None:
    if choice not in CHOICES:
        from fleetctl.errors import UsageError

        raise UsageError(f"--slurm {choice}: choose one of {', '.join(CHOICES)}")
    return CHOICES[choice]


def roots_dir() -> Path:
    return Path(os.environ.get("FLEETCTL_ROOTS_DIR") or DEFAULT_ROOTS)


def root_dir(suite: str) -> Path:
    return roots_dir() / suite


def is_complete(root: Path) -> bool:
    return (root / STAMP).is_file()


# ---------------------------------------------------------------- building the root
def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine's apt uses (deb822 `URIs:` or one-line `deb URL suite`), so the
    root comes from the same, reachable, mirror."""
    files = [sources / "sources.list"] + sorted((sources / "sources.list.d").glob("*.list")) \
        + sorted((sources / "sources.list.d").glob("*.sources"))
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^URIs:\s*(\S+)", line) or re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s", line)
            if m and re.search(r"/debian/?$", m.group(1)) and "security" not in m.group(1):
                return m.group(1).rstrip("/")
    return DEFAULT_MIRROR


def ensure_root(suite: str, progress=lambda _m: None) -> tuple[Path, float | None]:
    """The complete root of `suite`, built first when absent or incomplete. Returns (root, seconds the
    build took, None when the cached root was reused)."""
    root = root_dir(suite)
    if is_complete(root) and has_headers(root):
        return root, None
    roots_dir().mkdir(parents=True, exist_ok=True)
    fd = os.open(roots_dir() / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # two builders of one suite: the second reuses the first's root
        if not is_complete(root):
            return root, _build(suite, root, progress)
        if not has_headers(root):
            _add_headers(suite, root, progress)
        return root, None
    finally:
        os.close(fd)


def has_headers(root: Path) -> bool:
    return (root / SPANK_HEADER).is_file()


def _add_headers(suite: str, root: Path, progress) -> None:
    """A root cached before its Slurm headers were part of it: install just that package (a second or
    two; a full rebuild takes about 40 s). Pinned to the root's Slurm version, from the package lists
    debootstrap left in the root (no `apt-get update`), so nothing else in the root changes. Without
    them the lab still runs, only without the SPANK plugin: a warning, not an error."""
    try:
        version = system.run(["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}", "-W", "-f=${Version}",
                              "slurmd"], "the root's slurmd package version").stdout.strip()
        if not re.fullmatch(r"[A-Za-z0-9.+~:-]{1,64}", version):
            raise LabError(f"the root's slurmd package version: unusable: {version[:64]!r}")
        progress(f"adding {HEADERS_PACKAGE} {version} to the Debian {suite} root {root} (once)")
        system.run(["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive",
                    "LC_ALL=C", "chroot", str(root), "apt-get", "install", "-y", "-q",
                    "--no-install-recommends", "-o", "Dpkg::Use-Pty=0", f"{HEADERS_PACKAGE}={version}"],
                   f"apt-get install {HEADERS_PACKAGE} in the {suite} root", timeout=BUILD_TIMEOUT)
        if not has_headers(root):
            raise LabError(f"{HEADERS_PACKAGE} installed, yet no {SPANK_HEADER}")
    except LabError as exc:
        progress(f"warning: the Debian {suite} root {root}: {exc.message}; no SPANK plugin for its "
                 f"Slurm (remove the root to have it rebuilt)")


def _build(suite: str, root: Path, progress) -> float:
    system.require_commands(["debootstrap"])
    tmp = root.with_name(root.name + ".tmp")
    for stale in (tmp, root):  # an interrupted build, or a root without its stamp
        _remove_tree(stale)
    mirror = debian_mirror()
    progress(f"building the Debian {suite} root in {root} from {mirror} (once; cached)")
    t0 = time.monotonic()
    system.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(tmp),
                mirror], f"debootstrap {suite}", timeout=BUILD_TIMEOUT)
    # The package scripts must never start the root's daemons (debootstrap fakes start-stop-daemon
    # while it installs; this keeps apt inside the root from doing so later).
    policy = tmp / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    version = _version_of(tmp)
    (tmp / STAMP).write_text(f"suite={suite}\nmirror={mirror}\nslurm={version}\n")
    os.replace(tmp, root)
    return round(time.monotonic() - t0, 1)


def _remove_tree(path: Path) -> None:
    """Remove an unfinished root. A debootstrap killed in its second stage leaves /proc, /sys (and
    perhaps /dev) mounted inside it: unmount those first, never delete through a mount."""
    if not path.exists():
        return
    prefix = str(path) + "/"
    for mount in sorted((m for m in _mountpoints() if m.startswith(prefix)), reverse=True):
        system.run(["umount", "-l", mount], "remove an unfinished root", check=False)
    left = [m for m in _mountpoints() if m.startswith(prefix)]
    if left:
        raise LabError(f"{path}: still mounted inside: {', '.join(left[:3])}",
                       hint="unmount them, then run `fleetctl lab up` again")
    shutil.rmtree(path)


def _mountpoints() -> list[str]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    # Field 5 is the mount point, with spaces and the like octal-escaped.
    return [line.split()[4].encode().decode("unicode_escape") for line in lines if len(line.split()) > 4]


# ---------------------------------------------------------------- running the root's programs
def _in_root(root: Path, path: str) -> Path | None:
    """`path` (absolute, as seen inside the root) resolved inside the root: Debian's Slurm reaches its
    binaries through /etc/alternatives links, which must not be followed on this machine."""
    current = path
    for _ in range(16):
        candidate = root / current.lstrip("/")
        if candidate.is_symlink():
            target = os.readlink(candidate)
            current = target if target.startswith("/") else str(Path(current).parent / target)
            continue
        return candidate if candidate.is_file() else None
    return None


def program_path(root: Path, name: str) -> Path | None:
    for where in ("/usr/sbin/", "/usr/bin/"):
        found = _in_root(root, where + name)
        if found:
            return found
    return None


def library_path(root: Path) -> str:
    base = root / MULTIARCH
    return ":".join(str(p) for p in (base / "slurm-wlm", base, root / "usr/lib"))


def plugin_dir(root: Path) -> Path:
    return root / MULTIARCH / "slurm-wlm"


# The daemons' wrappers must be programs, not scripts: from 23.11 a daemon runs Prolog, Epilog and
# HealthCheck through a copy of itself (the "script launcher"), which it execs through an O_CLOEXEC file
# descriptor opened on its own argv[0]; a #! script exec'd that way fails with ENOENT (its interpreter
# cannot open /dev/fd/N). So a tiny C program, compiled per daemon with this machine's gcc.
_DAEMON_WRAPPER_C = r"""/* fleetctl lab: {name} of the Debian {suite} root, run by the root's loader. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{{
    char **args = calloc((size_t)argc + 8, sizeof(char *));
    int n = 0;

    if (!args)
        return 127;
    args[n++] = {loader};
    args[n++] = "--library-path";
    args[n++] = {libs};
    args[n++] = "--argv0";
    args[n++] = argc > 0 ? argv[0] : {argv0};
    args[n++] = {program};
    for (int i = 1; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    execv(args[0], args);
    perror({loader});
    return 127;
}}
"""

_WRAPPER = """#!/bin/sh
# fleetctl lab: {name} of the Debian {suite} root, run by the root's loader with the root's libraries.
exec {loader} --library-path {libs} --argv0 {argv0} {program} "$@"
"""


def write_wrappers(root: Path, suite: str, bindir: Path) -> dict[str, str]:
    """One small script per program in `bindir`; returns {name: standard path on this machine}
    (/usr/sbin/slurmd, /usr/bin/srun, ...), which the lab's mount namespace covers with the script."""
    bindir.mkdir(parents=True, exist_ok=True)
    loader, libs = root / LOADER, library_path(root)
    if not loader.is_file():
        raise LabError(f"slurm: {loader} missing: the {suite} root is incomplete",
                       hint=f"remove {root} and run `fleetctl lab up` again")
    standard = {}
    compiles = []
    for name in DAEMONS + CLIENTS:
        program = program_path(root, name)
        if program is None:
            if name in DAEMONS or name in CLIENTS[:6]:
                raise LabError(f"slurm: {name} missing in the {suite} root {root}",
                               hint=f"remove {root} and run `fleetctl lab up` again")
            continue
        argv0 = f"/usr/{'sbin' if name in DAEMONS else 'bin'}/{name}"
        script = bindir / name
        if name in DAEMONS:
            source = bindir / f".{name}.c"
            source.write_text(_DAEMON_WRAPPER_C.format(
                name=name, suite=suite, loader=_c_string(loader), libs=_c_string(libs),
                argv0=_c_string(argv0), program=_c_string(program)))
            compiles.append((name, subprocess.Popen(
                ["gcc", "-O2", "-o", str(script), str(source)], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        else:
            script.write_text(_WRAPPER.format(name=name, suite=suite, loader=shlex.quote(str(loader)),
                                              libs=shlex.quote(libs), argv0=argv0,
                                              program=shlex.quote(str(program))))
            script.chmod(0o755)
        standard[name] = argv0
    for name, proc in compiles:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise LabError(f"slurm: compiling the wrapper of {name} failed: {out.strip()[-200:]}")
    return standard


def _c_string(value) -> str:
    text = str(value)
    if any(c in text for c in '"\\\n') or not text.isascii():
        raise LabError(f"slurm: unusable path for a wrapper: {text!r}")
    return f'"{text}"'


def version(bindir: Path) -> tuple[int, int]:
    out = system.run([str(bindir / "slurmctld"), "-V"], "slurm version").stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    if not m:
        raise LabError(f"slurm: cannot read the version of {bindir / 'slurmctld'}: {out.strip()[:80]!r}")
    return int(m.group(1)), int(m.group(2))


def _version_of(root: Path) -> str:
    program = program_path(root, "slurmctld")
    if program is None:
        raise LabError(f"debootstrap: no slurmctld in the new root {root}")
    out = system.run([str(root / LOADER), "--library-path", library_path(root), str(program), "-V"],
                     "slurm version").stdout
    return out.strip().split()[-1] if out.strip() else "?"


# ---------------------------------------------------------------- the lab's mount namespace
def create_mount_ns(path: Path, bindir: Path, standard: dict[str, str]) -> None:
    """A private mount namespace, kept alive by a bind mount on `path`, in which the root's programs
    cover this machine's at their standard paths (only those that exist here: a bind needs a target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    system.run(["unshare", f"--mount={path}", "--propagation", "private", "true"], "mount namespace")
    for name, target in standard.items():
        if os.path.exists(target):
            system.run(["nsenter", f"--mount={path}", "mount", "--bind", str(bindir / name), target],
                       f"mount namespace: {name}")


def enter(mount_ns: str | None) -> list[str]:
    """Prefix entering the lab's mount namespace (nothing for the system Slurm). --wd=/ keeps the
    working directory a real one after the switch."""
    return ["nsenter", f"--mount={mount_ns}", "--wd=/"] if mount_ns else []
