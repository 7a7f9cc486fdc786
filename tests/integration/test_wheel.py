"""The wheel and the node bundle as an operator installs them (docs/deploy.md): built by
scripts/package, installed into a clean virtual environment with its dependencies from the package
index, without the extras (a node's install), and run there: --version, `audit --local` (the Slurm
hooks' path), `hook install`, `config check`. Nothing of this checkout is importable in that
environment. The node bundle (one .pyz) runs the same commands on this machine's own /usr/bin/python3
without its site-packages (-S), so with nothing but the standard library besides itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(dist: Path) -> None:
    subprocess.run([str(ROOT / "scripts" / "package"), "--out", str(dist)], check=True,
                   capture_output=True, env=dict(os.environ, PYTHON=sys.executable), timeout=300)


def git_version() -> str:
    """What scripts/package stamps from git: the commit count and the short hash (+ .dirty)."""
    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    sha = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    return f".dev{count}+g{sha}"


def test_the_wheel_installs_and_runs_on_a_node(tmp_path):
    dist = tmp_path / "dist"
    build(dist)
    [wheel] = dist.glob("fleetctl-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=600)
    fleetctl = str(venv / "bin" / "fleetctl")
    env = {"PATH": f"{venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH

    def run(*args):
        return subprocess.run([fleetctl, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    version = run("--version")
    assert version.returncode == 0 and git_version() in version.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import fleetctl; print(fleetctl.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout
    assert str(venv) in where and str(ROOT) not in where  # the installed copy, not this checkout
    local = run("audit", "--local", "--level", "quick", "--format", "json")
    assert local.returncode in (0, 1, 2), local.stderr  # the node's own verdict; never an error
    assert json.loads(local.stdout)["level"] == "quick"
    site = str(ROOT / "site_configs" / "roce-leaf-spine.toml")
    hooks = run("hook", "install", str(tmp_path / "hooks"), "--site", site)
    assert hooks.returncode == 0, hooks.stderr
    assert (tmp_path / "hooks" / "fleetctl-prolog").stat().st_mode & 0o111
    # A node's install checks what it can, and says what it could not (the fabric needs [mesh]).
    check = run("config", "check", site, "--format", "json")
    assert check.returncode == 0, check.stderr
    assert any("numpy" in note for note in json.loads(check.stdout)["not_checked"])
    # The controller's commands say which extra they need instead of failing with a traceback.
    mesh = run("audit", "analyze", str(tmp_path / "none.h5"))
    assert mesh.returncode == 3 and "Traceback" not in mesh.stderr


def test_the_node_bundle_runs_on_the_system_python(tmp_path):
    dist = tmp_path / "dist"
    build(dist)
    [bundle] = dist.glob("fleetctl-*.pyz")
    assert bundle.stat().st_mode & 0o111 and bundle.read_bytes().startswith(b"#!/usr/bin/python3 -I\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)}
    assert subprocess.run([str(bundle), "--version"], env=env, capture_output=True).returncode == 0

    def run(*args):  # -S: no site-packages at all, so the bundle must bring every dependency
        return subprocess.run(["/usr/bin/python3", "-I", "-S", str(bundle), *args], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=120)

    version = run("--version")
    assert version.returncode == 0 and git_version() in version.stdout, version.stderr
    local = run("audit", "--local", "--level", "quick", "--format", "json")
    assert local.returncode in (0, 1, 2) and json.loads(local.stdout)["level"] == "quick", local.stderr
    site = str(ROOT / "site_configs" / "roce-leaf-spine.toml")
    hooks = run("hook", "install", str(tmp_path / "hooks"), "--site", site)
    assert hooks.returncode == 0, hooks.stderr
    # the hooks run the bundle itself (the node has no fleetctl on PATH)
    assert f"FLEETCTL='{bundle.resolve()}'" in (tmp_path / "hooks" / "fleetctl-hooks.env").read_text()
    check = run("config", "check", site, "--format", "json")
    assert check.returncode == 0 and json.loads(check.stdout)["valid"], check.stderr
