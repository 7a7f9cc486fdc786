"""spank_fleetctl.so as built by its Makefile: hardening flags, exported symbols, and the plugin's
identity symbols SPANK looks up. Builds into a temporary copy (never the repo's build/). The env_file
reader on its own, and the plugin's entry points on a mock SPANK API (tests/mock_spank.c): the
counters directory a job that is not root's gets, used by a real job of uid 65534."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
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


# ---- the plugin's entry points on a mock SPANK API (tests/mock_spank.c, tests/spank_run.c) ----

@pytest.fixture(scope="module")
def spank_run(tmp_path_factory) -> Path:
    """spank_run: the plugin's own objects (every src/*.c) linked with the mock SPANK API."""
    _need("gcc")
    if not Path("/usr/include/slurm/spank.h").is_file():
        _missing("slurm/spank.h is not installed (libslurm-dev)")
    exe = tmp_path_factory.mktemp("spankrun") / "spank_run"
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-std=gnu11", f"-I{SRC / 'src'}",
                    f"-I{SRC / 'tests'}", "-o", str(exe), str(SRC / "tests" / "spank_run.c"),
                    str(SRC / "tests" / "mock_spank.c"), *map(str, sorted((SRC / "src").glob("*.c")))],
                   check=True, capture_output=True, text=True)
    return exe


def _spank(exe: Path, context: str, *args: str, uid: int = 0, gid: int = 0) -> tuple[dict, list[str], str]:
    """(environment set in the tasks, error lines, rc line) of one run of the entry points."""
    plugstack = [a for a in args if not a.startswith("--opt=")]
    opts = [x for a in args if a.startswith("--opt=") for x in ("--opt", a[len("--opt="):])]
    out = subprocess.run([str(exe), context, "--uid", str(uid), "--gid", str(gid), *opts, "--", *plugstack],
                         capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
    env = dict(line[len("setenv "):].split("=", 1) for line in out if line.startswith("setenv "))
    # a line of none of spank_run's kinds is the rest of a message that ran onto a second line
    errors = [line[6:] if line.startswith("error ") else f"(second line) {line}" for line in out[:-1]
              if not line.startswith(("setenv ", "unsetenv ", "job_control "))]
    return env, errors, out[-1]


def _as_nobody(*cmd: str) -> list[str]:
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="a job of another user needs root and setpriv")
def test_a_non_root_job_publishes_counters_that_watch_accepts(spank_run, tmp_path):
    """Issue 20, defect 23: /run/fleetctl is root's (0755), so the plugin of a job that is not root's
    could not create its counters directory and `failover watch` saw no job. slurmstepd (as root,
    before dropping privileges) prepares <counters_dir>/<uid> owned by the job's user and points
    FLEET_NET_COUNTERS_DIR at it; the job writes there and nowhere else."""
    import tempfile

    sys.path.insert(0, str(SRC.parent / "nccl_plugin" / "tests"))
    import fleetnet

    from fleetctl.failover import counters

    fleetnet.build()
    top = Path(tempfile.mkdtemp(prefix="fleet-ctr-"))  # not under pytest's 0700 tree: nobody must reach it
    try:
        top.chmod(0o755)
        base = top / "run" / "fleetctl" / "failover"
        plugstack = (f"counters_dir={base}", f"plugin_dir={fleetnet.LIB.parent}", "ifaces=127.0.0.1,127.0.0.2")
        env, errors, rc = _spank(spank_run, "remote", *plugstack, uid=65534, gid=65534)
        assert (errors, rc) == ([], "rc init=0 post_opt=0 user_init=0")
        assert env["FLEET_NET_COUNTERS_DIR"] == f"{base}/65534"
        st_base, st_user = (base).stat(), (base / "65534").stat()
        assert (st_base.st_uid, oct(st_base.st_mode & 0o7777)) == (0, "0o755")
        assert (st_user.st_uid, st_user.st_gid, oct(st_user.st_mode & 0o7777)) == (65534, 65534, "0o755")

        # the job, as nobody, with exactly the tasks' environment: both ends of a transfer
        job_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        job = subprocess.Popen(_as_nobody(str(fleetnet.HARNESS), "--lib", str(fleetnet.LIB), "--version", "12",
                                          "--fork", "--seconds", "3", "--max-size", str(1 << 16)),
                               env=job_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: dict[int, str] = {}
        while job.poll() is None:
            for c in counters.scan(base).files:
                seen[c.pid] = c.path
            time.sleep(0.05)
        out, err = job.communicate()
        assert job.returncode == 0, err[-2000:]
        assert len(seen) == 2 and all(p == f"{base}/65534/{pid}.json" for pid, p in seen.items()), \
            (seen, counters.scan(base))
        assert all((base / "65534" / f"{pid}.json").stat().st_uid == 65534 for pid in seen)

        # nobody writes into no other user's directory, nor into the base
        _spank(spank_run, "remote", *plugstack, uid=0, gid=0)
        for elsewhere in (base / "0", base):
            proc = subprocess.run(_as_nobody(str(fleetnet.HARNESS), "--lib", str(fleetnet.LIB), "--version", "12",
                                             "--fork", "--messages", "20"),
                                  env={**job_env, "FLEET_NET_COUNTERS_DIR": str(elsewhere)},
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert f"counters directory {elsewhere}: " in proc.stderr or \
                f"cannot write counters {elsewhere}/" in proc.stderr, proc.stderr[-2000:]
            assert not list(elsewhere.glob("*.json"))
        # what nobody forges in its own directory for root's process is refused, with the reason
        forged = base / "65534" / "1.json"
        text = json.dumps({"pid": 1, "updated": 1.0, **{k: 0 for k in counters.FIELDS}})
        subprocess.run(_as_nobody("sh", "-c", 'printf "%s" "$1" > "$0"', str(forged), text), check=True)
        refused = counters.scan(base).refused
        assert refused.pop(str(forged)) == "written by uid 65534, but process 1 runs as uid 0"
        assert refused == {path: f"no process {pid} here: its owner cannot be checked" for pid, path in seen.items()}
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="directories of other users need root")
def test_counters_dir_is_refused_when_unsafe(spank_run, tmp_path):
    """The base must be root's and writable by nobody else; a user's directory must not be a link
    or another user's. A refusal is one error line and, with required=yes, fails the job."""
    base = tmp_path / "failover"
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    env, errors, rc = _spank(spank_run, "remote", f"counters_dir={base}", uid=65534, gid=65534)
    assert "FLEET_NET_COUNTERS_DIR" not in env and rc == "rc init=0 post_opt=0 user_init=0"
    assert errors == [f"spank_fleetctl: remote: counters_dir={base}: must be owned by root and writable by nobody else"]
    base.chmod(0o755)
    (base / "65534").symlink_to("/etc")
    env, errors, rc = _spank(spank_run, "remote", f"counters_dir={base}", "required=yes", uid=65534, gid=65534)
    assert errors == [f"spank_fleetctl: remote: counters_dir={base}: 65534: a symbolic link"]
    assert rc == "rc init=0 post_opt=-1 user_init=0"
    (base / "65534").unlink()
    (base / "65534").mkdir()
    os.chown(base / "65534", 1000, 1000)
    _, errors, _ = _spank(spank_run, "remote", f"counters_dir={base}", uid=65534, gid=65534)
    assert errors == [f"spank_fleetctl: remote: counters_dir={base}: 65534: owned by uid 1000"]
    # off: nothing prepared, nothing set; failover off: the same
    env, errors, _ = _spank(spank_run, "remote", "counters_dir=off", uid=65534, gid=65534)
    assert "FLEET_NET_COUNTERS_DIR" not in env and not errors
    env, errors, _ = _spank(spank_run, "remote", f"counters_dir={base}", "--opt=fleet-failover=off", uid=7, gid=7)
    assert env == {} and not errors and not (base / "7").exists()
    _, errors, rc = _spank(spank_run, "remote", "counters_dir=relative/dir")
    assert rc.startswith("rc init=-1") and "counters_dir=relative/dir" in errors[0]


def test_errors_show_values_on_one_line(spank_run):
    """What a user or an admin typed is shown bounded, a control character as '?': a value can never
    add a line of its own to srun's or slurmstepd's log (found by tests/unit/test_c_fuzz.py)."""
    forged = "x\nsrun: error: spank_fleetctl: all good\x1b[2K"
    for context, args in (("local", (f"--opt=fleet-failover={forged}",)), ("remote", (f"--opt=fleet-snapshot={forged}",)),
                          ("local", (f"default={forged}",)), ("remote", (f"plugin_dir=/a\n{forged}",)),
                          ("local", (f"ifaces{forged}",)), ("local", ("x" * 5000,))):
        _, errors, rc = _spank(spank_run, context, *args)
        assert rc.startswith("rc init=-1") and len(errors) == 1, (args, errors)
        assert errors[0].startswith("spank_fleetctl: ") and len(errors[0]) < 200, errors
        assert not any(ord(c) < 0x20 or ord(c) == 0x7f for c in errors[0]), errors
    _, errors, _ = _spank(spank_run, "local", f"--opt=fleet-failover={forged}")
    assert errors == ["spank_fleetctl: local: --fleet-failover=x?srun: error: spank_fleetctl: all good?[2K: "
                      "invalid value (expected auto or off)"]
