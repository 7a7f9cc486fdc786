"""spank_fleetctl.so for a Debian root's Slurm: built against the root's headers, never this machine's.
Builds into a temporary copy of spank_plugin/ (never the repo's build/), from a fake root whose
slurm/ headers are this machine's with another version number."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetctl.errors import LabError
from fleetctl.lab import slurmroot, spankbuild

HOST_HEADERS = Path("/usr/include/slurm")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    for tool in ("make", "gcc", "nm", "readelf"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if not (HOST_HEADERS / "spank.h").is_file():
        pytest.skip("slurm/spank.h is not installed (libslurm-dev)")
    work = tmp_path / "spank_plugin"
    shutil.copytree(spankbuild.SPANK_DIR, work, ignore=shutil.ignore_patterns("build"))
    monkeypatch.setattr(spankbuild, "SPANK_DIR", work)
    root = tmp_path / "trixie"
    shutil.copytree(HOST_HEADERS, root / "usr/include/slurm")
    version_h = root / "usr/include/slurm/slurm_version.h"
    version_h.write_text(re.sub(r"(#define SLURM_VERSION_NUMBER) 0x[0-9a-fA-F]+", r"\1 0x180b05",
                                version_h.read_text()))
    (root / slurmroot.STAMP).write_text("suite=trixie\nmirror=http://x/debian\nslurm=24.11.5\n")
    return root


def _symbol_value(lib: Path, name: str) -> int:
    """A 4-byte read-only symbol's value, read from the file (the plugin cannot be dlopen'ed here: it
    binds the spank_* functions of srun/slurmstepd immediately)."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    address = next(int(l.split()[0], 16) for l in nm.stdout.splitlines() if l.split()[-1] == name)
    sections = subprocess.run(["readelf", "-SW", str(lib)], capture_output=True, text=True, check=True)
    for line in sections.stdout.splitlines():
        m = re.search(r"\]\s+\S+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            start, offset, size = (int(g, 16) for g in m.groups())
            if start <= address < start + size and start:
                data = lib.read_bytes()[address - start + offset:][:4]
                return int.from_bytes(data, "little")
    raise AssertionError(f"{name} not in any section of {lib}")


def test_built_against_the_roots_headers_into_a_per_version_dir(fake):
    lib = spankbuild.build(fake)
    assert lib == spankbuild.SPANK_DIR / "build" / "slurm-24.11.5" / "spank_fleetctl.so" == \
        spankbuild.plugin_for(fake)
    assert lib.is_file()
    assert _symbol_value(lib, "plugin_version") == 0x180b05  # 24.11.5: the root's, not 22.05's
    assert not (spankbuild.SPANK_DIR / "build" / "spank_fleetctl.so").exists()  # the system build untouched
    assert spankbuild.build(fake) == lib  # again: make has nothing to do


def test_headers_falling_back_to_this_machines_are_refused(fake):
    # A root whose slurm/ lacks slurm_version.h: gcc would take /usr/include/slurm's (22.05).
    (fake / "usr/include/slurm/slurm_version.h").unlink()
    with pytest.raises(LabError, match="SLURM_VERSION_NUMBER is '0x.*the root's Slurm is 24.11.5"):
        spankbuild.build(fake)


def test_a_root_without_headers_or_stamp_is_a_clear_error(fake):
    shutil.rmtree(fake / "usr/include")
    with pytest.raises(LabError, match="libslurm-dev"):
        spankbuild.build(fake)
    (fake / slurmroot.STAMP).unlink()
    with pytest.raises(LabError, match="no complete Debian root"):
        spankbuild.plugin_for(fake)
