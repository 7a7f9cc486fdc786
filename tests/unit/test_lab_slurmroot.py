"""The Debian roots of the lab's newer Slurms: mirror, cache and stamp, paths inside a root, wrappers."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from fleetctl.errors import LabError, UsageError
from fleetctl.lab import slurmroot
from fleetctl.lab.topology import LabParams


def test_mirror_from_deb822_and_one_line_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n")
    assert slurmroot.debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian/ bookworm main\n")
    assert slurmroot.debian_mirror(tmp_path) == "http://other.example/debian"
    assert slurmroot.debian_mirror(tmp_path / "nothing") == slurmroot.DEFAULT_MIRROR


def test_a_root_is_built_when_absent_or_unstamped_and_reused_when_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_ROOTS_DIR", str(tmp_path))
    built = []

    def fake_build(suite, root, progress):
        (root / "usr/include/slurm").mkdir(parents=True)
        (root / slurmroot.SPANK_HEADER).write_text("")
        (root / slurmroot.STAMP).write_text("suite=trixie\n")
        built.append(suite)
        return 1.0

    monkeypatch.setattr(slurmroot, "_build", fake_build)
    assert slurmroot.ensure_root("trixie") == (tmp_path / "trixie", 1.0)
    assert slurmroot.ensure_root("trixie") == (tmp_path / "trixie", None)  # cached
    (tmp_path / "trixie" / slurmroot.STAMP).unlink()  # an interrupted or damaged root
    assert not slurmroot.is_complete(tmp_path / "trixie")
    shutil.rmtree(tmp_path / "trixie")
    assert slurmroot.ensure_root("trixie")[1] == 1.0 and built == ["trixie", "trixie"]


def test_a_cached_root_without_headers_gets_the_package_pinned_not_a_rebuild(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_ROOTS_DIR", str(tmp_path))
    root = tmp_path / "trixie"
    root.mkdir()
    (root / slurmroot.STAMP).write_text("suite=trixie\nslurm=24.11.5\n")
    monkeypatch.setattr(slurmroot, "_build", lambda *a: pytest.fail("rebuilt a complete root"))
    calls, said = [], []

    def fake_run(cmd, step, **kwargs):
        calls.append(cmd)
        if cmd[0] == "dpkg-query":
            return subprocess.CompletedProcess(cmd, 0, "24.11.5-4+deb13u1", "")
        (root / "usr/include/slurm").mkdir(parents=True)
        (root / slurmroot.SPANK_HEADER).write_text("")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(slurmroot.system, "run", fake_run)
    assert slurmroot.ensure_root("trixie", said.append) == (root, None)
    assert calls[0][:2] == ["dpkg-query", f"--admindir={root / 'var/lib/dpkg'}"]
    install = calls[1]
    assert install[install.index("chroot"):install.index("chroot") + 2] == ["chroot", str(root)]
    assert install[-1] == "libslurm-dev=24.11.5-4+deb13u1" and "update" not in install
    assert slurmroot.ensure_root("trixie") == (root, None) and len(calls) == 2  # now complete
    assert said and "adding libslurm-dev" in said[0]


def test_a_failed_headers_install_warns_and_keeps_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_ROOTS_DIR", str(tmp_path))
    root = tmp_path / "trixie"
    root.mkdir()
    (root / slurmroot.STAMP).write_text("suite=trixie\nslurm=24.11.5\n")

    def fake_run(cmd, step, **kwargs):
        if cmd[0] == "dpkg-query":
            return subprocess.CompletedProcess(cmd, 0, "24.11.5-4+deb13u1", "")
        raise LabError(f"{step}: `apt-get` failed: E: 404  Not Found")

    monkeypatch.setattr(slurmroot.system, "run", fake_run)
    said = []
    assert slurmroot.ensure_root("trixie", said.append) == (root, None)
    assert "404" in said[-1] and "no SPANK plugin" in said[-1] and root.is_dir()


def test_choices():
    assert slurmroot.suite_of("system") is None and slurmroot.suite_of("24.11") == "trixie"
    with pytest.raises(UsageError, match="--slurm 23.02"):
        slurmroot.suite_of("23.02")
    with pytest.raises(UsageError, match="--slurm bullseye"):
        LabParams(slurm_from="bullseye").validate()


def _fake_root(root):
    """Debian's layout: /usr/sbin/slurmd -> /etc/alternatives/slurmd -> /usr/sbin/slurmd-wlm."""
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "etc/alternatives").mkdir(parents=True)
    (root / slurmroot.MULTIARCH).mkdir(parents=True)
    (root / slurmroot.LOADER).write_text("")
    for name in slurmroot.DAEMONS:
        (root / f"usr/sbin/{name}-wlm").write_text("")
        os.symlink(f"/usr/sbin/{name}-wlm", root / f"etc/alternatives/{name}")
        os.symlink(f"/etc/alternatives/{name}", root / f"usr/sbin/{name}")
    for name in slurmroot.CLIENTS[:6]:
        (root / f"usr/bin/{name}").write_text("")


def test_paths_resolve_inside_the_root_not_on_this_machine(tmp_path):
    root = tmp_path / "root"
    _fake_root(root)
    assert slurmroot.program_path(root, "slurmd") == root / "usr/sbin/slurmd-wlm"
    assert slurmroot.program_path(root, "srun") == root / "usr/bin/srun"
    assert slurmroot.program_path(root, "sacct") is None
    os.symlink("/etc/alternatives/loop", root / "etc/alternatives/loop")
    assert slurmroot.program_path(root, "loop") is None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_wrappers_run_the_roots_program_through_its_loader(tmp_path):
    root = tmp_path / "root"
    _fake_root(root)
    # A "loader" that prints the argv it gets: what a wrapper passes on is checked end to end.
    loader = root / slurmroot.LOADER
    loader.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    loader.chmod(0o755)
    bindir = tmp_path / "bin"
    standard = slurmroot.write_wrappers(root, "trixie", bindir)
    assert standard["slurmd"] == "/usr/sbin/slurmd" and standard["srun"] == "/usr/bin/srun"
    assert "sacct" not in standard  # not in this root: no wrapper
    libs = slurmroot.library_path(root)
    for name, program in (("slurmd", root / "usr/sbin/slurmd-wlm"), ("scontrol", root / "usr/bin/scontrol")):
        out = subprocess.run([str(bindir / name), "-D", "two words"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
        assert out[:2] == ["--library-path", libs] and out[2] == "--argv0"
        assert out[4:] == [str(program), "-D", "two words"]
    # The daemons' wrappers are programs (Slurm execs its script launcher through an O_CLOEXEC fd).
    assert (bindir / "slurmd").read_bytes()[:4] == b"\x7fELF"


def test_a_root_without_its_loader_is_a_clear_error(tmp_path):
    root = tmp_path / "root"
    _fake_root(root)
    (root / slurmroot.LOADER).unlink()
    with pytest.raises(LabError, match="incomplete"):
        slurmroot.write_wrappers(root, "trixie", tmp_path / "bin")


def test_an_unfinished_root_is_unmounted_before_it_is_removed(tmp_path, monkeypatch):
    tmp = tmp_path / "trixie.tmp"
    (tmp / "proc").mkdir(parents=True)
    mounted = [str(tmp / "proc"), "/proc"]
    calls = []

    def fake_run(cmd, step, check=True, **_kw):
        calls.append(cmd)
        mounted.remove(cmd[-1])

    monkeypatch.setattr(slurmroot, "_mountpoints", lambda: list(mounted))
    monkeypatch.setattr(slurmroot.system, "run", fake_run)
    slurmroot._remove_tree(tmp)
    assert calls == [["umount", "-l", str(tmp / "proc")]] and not tmp.exists() and mounted == ["/proc"]
    (tmp / "sys").mkdir(parents=True)
    mounted.append(str(tmp / "sys"))
    monkeypatch.setattr(slurmroot.system, "run", lambda *a, **k: None)  # umount fails: nothing deleted
    with pytest.raises(LabError, match="still mounted"):
        slurmroot._remove_tree(tmp)
    assert (tmp / "sys").is_dir()
