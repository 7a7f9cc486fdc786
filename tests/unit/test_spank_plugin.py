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


ENV_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "envfile.h"
int main(int argc, char **argv)
{
    static struct fleet_env env;
    char why[256] = "";
    if (argc != 2) return 2;
    if (fleet_env_load(argv[1], &env, why, sizeof(why)) != 0) { printf("error: %s\n", why); return 1; }
    for (int i = 0; i < env.n; i++) printf("%s=%s\n", env.name[i], env.value[i]);
    return 0;
}
"""


@pytest.fixture(scope="module")
def env_reader(tmp_path_factory) -> Path:
    """The plugin's env_file parser (src/envfile.c, no Slurm in it) compiled with a small driver."""
    _need("gcc")
    work = tmp_path_factory.mktemp("envfile")
    (work / "main.c").write_text(ENV_DRIVER)
    exe = work / "envread"
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-D_FORTIFY_SOURCE=2", "-O2", f"-I{SRC / 'src'}",
                    str(work / "main.c"), str(SRC / "src" / "envfile.c"), "-o", str(exe)], check=True,
                   capture_output=True, text=True)
    return exe


def _read_env(exe: Path, path: Path) -> tuple[int, str]:
    proc = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout


def test_env_file_of_the_failover_plan_is_read(env_reader, tmp_path):
    from fleetctl.failover.plan import env_file_text

    path = tmp_path / "failover.env"
    env = {"NCCL_NET_FORCE_MERGE": "mlx5_0,mlx5_1;mlx5_2,mlx5_3", "NCCL_IB_RESILIENCY_PORT_FAILOVER": "1",
           "FLEET_NET_IFACES": "eth0,eth1"}
    path.write_text(env_file_text(env, header="fleetctl failover plan"))
    rc, out = _read_env(env_reader, path)
    assert rc == 0 and out.splitlines() == [f"{k}={v}" for k, v in env.items()]


@pytest.mark.parametrize("text, why", [
    ("LD_PRELOAD=/tmp/x.so\n", "line 1"),
    ("NCCL_NET=fleet\nNCCL_X=a b\n", "line 2"),
    ("NCCL_NET=$(reboot)\n", "line 1"),
    ("NCCL_=1\n", "line 1"),
    ("nccl_net=fleet\n", "line 1"),
    ("NCCL_NET\n", "line 1"),
    ("".join(f"NCCL_V{i}=1\n" for i in range(65)), "more than 64"),
    ("NCCL_X=" + "a" * 1025 + "\n", "line 1"),
    ("NCCL_" + "A" * 60 + "=1\n", "line 1"),  # a name over 64 characters
    ("NCCL_NET=fleet\0x\n", "line 1"),  # a NUL inside the value
    ("NCCL_\0=1\n", "line 1"),
    ("NCCL_NET=fleet\r\n", "line 1"),  # CRLF: the CR would end up in the value
    ("NCCL_NET=fleet\n=1\n", "line 2"),
])
def test_env_file_refuses_bad_lines_whole(env_reader, tmp_path, text, why):
    path = tmp_path / "bad.env"
    path.write_text(text)
    rc, out = _read_env(env_reader, path)
    assert rc == 1 and why in out, out


def test_env_file_must_be_roots_regular_file_writable_by_nobody_else(env_reader, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("ownership checks need files owned by root")
    path = tmp_path / "f.env"
    path.write_text("NCCL_NET=fleet\n")
    path.chmod(0o664)
    assert _read_env(env_reader, path) == (1, "error: must be owned by root and writable by nobody else\n")
    path.chmod(0o644)
    os.chown(path, 1000, 0)
    assert _read_env(env_reader, path)[0] == 1
    os.chown(path, 0, 0)
    assert _read_env(env_reader, path) == (0, "NCCL_NET=fleet\n")
    link = tmp_path / "link.env"
    link.symlink_to(path)
    assert _read_env(env_reader, link)[0] == 1
    big = tmp_path / "big.env"
    big.write_text("# x\n" * 20000)
    assert "larger than" in _read_env(env_reader, big)[1]
