"""spank_fleetctl.so as built by its Makefile: hardening flags, exported symbols, and the plugin's
identity symbols SPANK looks up. Builds into a temporary copy (never the repo's build/)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "spank_plugin"


def _missing(what: str) -> None:
    """Skip on a developer's machine without the build tools; fail in CI, which installs them."""
    if os.environ.get("CI"):
        pytest.fail(f"{what}: scripts/install provides it, so CI must have it")
    pytest.skip(what)


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        _missing(f"{tool} is not installed")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    for tool in ("make", "gcc", "nm", "readelf"):
        _need(tool)
    if not Path("/usr/include/slurm/spank.h").is_file():
        _missing("slurm/spank.h is not installed (libslurm-dev)")
    work = tmp_path_factory.mktemp("spank") / "spank_plugin"
    shutil.copytree(SRC, work, ignore=shutil.ignore_patterns("build"))
    log = subprocess.run(["make", "-C", str(work)], capture_output=True, text=True, timeout=300)
    assert log.returncode == 0, log.stdout + log.stderr
    return work / "build" / "spank_fleetctl.so", log.stdout


def test_compiled_with_the_hardening_flags(built):
    _, log = built
    compiles = [l for l in log.splitlines() if " -c " in l]
    assert compiles
    for line in compiles:
        for flag in ("-Wall", "-Wextra", "-Werror", "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong",
                     "-fPIC"):
            assert flag in line.split(), (flag, line)
    link = next(l for l in log.splitlines() if "-shared" in l)
    assert "-Wl,-z,relro,-z,now" in link and "-Wl,--version-script=exports.map" in link


def test_exports_only_the_spank_symbols(built):
    lib, _ = built
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    required = {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version"}
    assert required <= names
    assert {"slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_user_init"} <= names
    assert all(n in required or n.startswith("slurm_spank_") for n in names), names


def test_plugin_identity(built):
    lib, _ = built
    data = lib.read_bytes()
    assert b"spank_fleetctl\0" in data and b"spank\0" in data


def test_full_relro_and_no_executable_stack(built):
    lib, _ = built
    dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "BIND_NOW" in dyn or "NOW" in dyn
    seg = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "GNU_RELRO" in seg
    stack = next(l for l in seg.splitlines() if "GNU_STACK" in l)
    assert "RWE" not in stack


def test_stack_protector_is_compiled_in(built):
    lib, _ = built
    out = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    assert "__stack_chk_fail" in out
