"""The Debian packages as an operator installs them (docs/deploy.md), on a clean Debian 13 root: the
lab's cached debootstrap root (Slurm 24.11), seen through an overlay so the cache stays untouched.

`scripts/package --deb --slurm-root ROOT` builds fleetctl (all) and fleetctl-slurm-plugins against
that root's Slurm headers with dpkg-buildpackage; apt installs both there with their dependencies from
the Debian archive; then --version, `audit --local`, `config check`, `hook install` and the installed
Prolog run inside the root, its own srun loads the SPANK plugin, and a purge leaves nothing of
fleetctl behind. Tests run in file order against one install; the last one purges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.lab import slurmroot
from fleetctl.lab.debroot import add_one_node_cluster, build_packages, install_debs, overlay_root

ROOT = Path(__file__).resolve().parents[2]
# What apt and dpkg keep about any install: not fleetctl's files.
BOOKKEEPING = ("var/lib/apt/", "var/cache/apt/", "var/lib/dpkg/", "var/log/apt/", "var/log/dpkg.log",
               "var/cache/debconf/", "var/log/alternatives.log", "var/cache/ldconfig/", "etc/ld.so.cache",
               "tmp/", "root/", "etc/resolv.conf", "var/lib/systemd/deb-systemd-helper", "var/lib/ucf/",
               "etc/hosts")  # written by netbase's postinst (python3 depends on it), not removed on purge



@pytest.fixture(scope="module")
def debian13(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("needs root (overlay mount, chroot)")
    root, _ = slurmroot.ensure_root("trixie")
    work = tmp_path_factory.mktemp("deb")
    debs, _ = build_packages(work / "dist", root, sys.executable)
    assert [p.name.split("_")[0] for p in debs] == ["fleetctl-slurm-plugins", "fleetctl"]
    with overlay_root(root, work / "root") as system:
        system.before = system.files()
        install_debs(system, debs)
        add_one_node_cluster(system)
        system.debs = debs
        system.version = debs[0].name.split("_")[1].replace("~dev", ".dev")
        yield system


def test_lintian_finds_no_error_or_warning(debian13):
    """Debian's own checker of packages: no E: or W: tag (informational ones are listed, not failed)."""
    result = subprocess.run(["lintian", "--tag-display-limit", "0", *map(str, debian13.debs)], capture_output=True,
                            text=True, timeout=600)
    tags = [line for line in result.stdout.splitlines() if line[:2] in ("E:", "W:")]
    assert not tags, tags


def test_version_is_the_one_built_from_git(debian13):
    result = debian13.run("fleetctl", "--version")
    assert result.returncode == 0 and result.stdout.split()[-1] == debian13.version, result.stderr
    assert (debian13.merged / "usr/bin/fleetctl").read_text().startswith("#!/usr/bin/python3 -I\n")
    # byte-compiled at install (py3compile), so a Prolog never compiles
    assert list((debian13.merged / "usr/lib/python3/dist-packages/fleetctl/audit/__pycache__").glob("hooks.*.pyc"))


def test_audit_local_and_config_check_run(debian13):
    local = debian13.run("fleetctl", "audit", "--local", "--level", "quick", "--format", "json",
                         "--site", "/etc/fleetctl/site.toml", "--node", "n1")
    assert local.returncode in (0, 1), local.stderr  # a verdict about this machine, never an error
    assert json.loads(local.stdout)["level"] == "quick"
    check = debian13.run("fleetctl", "config", "check", "/etc/fleetctl/site.toml", "--format", "json")
    assert check.returncode == 0 and json.loads(check.stdout)["valid"], check.stderr


def test_a_missing_extra_is_named_as_its_debian_packages(debian13):
    debian13.merged.joinpath("etc/fleetctl/fabric.toml").write_text(
        (ROOT / "site_configs" / "roce-leaf-spine.toml").read_text())
    check = debian13.run("fleetctl", "config", "check", "/etc/fleetctl/fabric.toml")
    assert check.returncode == 0, check.stderr
    assert "apt install python3-numpy python3-scipy python3-h5py" in check.stdout


def test_the_installed_prolog_passes_and_logs(debian13):
    hooks = debian13.run("fleetctl", "hook", "install", "/etc/slurm/fleetctl", "--site", "/etc/fleetctl/site.toml")
    assert hooks.returncode == 0, hooks.stderr
    assert "FLEETCTL='/usr/bin/fleetctl'" in (debian13.merged / "etc/slurm/fleetctl/fleetctl-hooks.env").read_text()
    prolog = debian13.run("/etc/slurm/fleetctl/fleetctl-prolog",
                          env={"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_JOB_USER": "root"})
    assert prolog.returncode == 0, prolog.stderr
    log = (debian13.merged / "var/log/fleetctl-hooks.log").read_text()
    assert "prolog node=n1 job=7 verdict=pass" in log, log


def test_the_roots_slurm_loads_the_spank_plugin(debian13):
    conf = (debian13.merged / "etc/slurm/plugstack.conf.d/fleetctl.conf").read_text()
    assert "optional /usr/lib/fleetctl/spank_fleetctl.so" in conf and "default=off" in conf
    result = debian13.run("srun", "--help", timeout=60)
    assert "--fleet-failover=auto|off" in result.stdout, result.stdout[-1500:] + result.stderr[-1500:]
    depends = debian13.run("dpkg-query", "-W", "-f=${Depends}", "fleetctl-slurm-plugins").stdout
    assert "slurm-wlm-basic-plugins (>= 24.11)" in depends and "(<< 24.11.99)" in depends


def test_man_pages_are_installed(debian13):
    pages = debian13.merged / "usr/share/man/man1"
    assert (pages / "fleetctl.1.gz").is_file() and (pages / "fleetctl-audit-run.1.gz").is_file()


def test_purge_leaves_nothing_of_fleetctl(debian13):
    """Last: the admin's own files go as docs/deploy.md says, then apt purges both packages and the
    dependencies they brought; what is left beside apt's bookkeeping must be nothing."""
    for path in ("etc/slurm/fleetctl", "etc/fleetctl"):
        subprocess.run(["rm", "-rf", str(debian13.merged / path)], check=True)
    (debian13.merged / "etc/slurm/slurm.conf").unlink()
    purge = debian13.run("apt-get", "purge", "-y", "-q", "fleetctl", "fleetctl-slurm-plugins")
    assert purge.returncode == 0, purge.stdout[-2000:] + purge.stderr[-2000:]
    autoremove = debian13.run("apt-get", "autoremove", "--purge", "-y", "-q")
    assert autoremove.returncode == 0, autoremove.stderr[-2000:]
    left = sorted(p for p in debian13.files() - debian13.before if not p.startswith(BOOKKEEPING))
    assert not [p for p in left if "fleetctl" in p], left
    assert not left, f"left behind by the install and purge: {left[:40]}"
