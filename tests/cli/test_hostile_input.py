"""Hostile input at the CLI: the real `fleetctl` process, as an operator or a site file would drive it
(docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fleetctl(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FLEETCTL_SITE", None)
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], capture_output=True, text=True,
                          env=env, timeout=60, cwd=tmp_path)


def site_file(tmp_path: Path, nodes: str) -> str:
    path = tmp_path / "site.toml"
    path.write_text('[cluster]\nname = "t"\n[access]\ntransport = "local"\n'
                    f'[[node_classes]]\nname = "c"\nnodes = "{nodes}"\n')
    return str(path)


def test_exec_with_a_group_runs_no_shell(tmp_path):
    marker = tmp_path / "pwned"
    site = site_file(tmp_path, "n[1-2]")
    out = fleetctl("--site", site, "exec", f"@x';touch${{IFS}}{marker};'", "--", "true", tmp_path=tmp_path)
    assert out.returncode == 3, out.stderr
    assert "invalid group @x" in out.stderr and "Traceback" not in out.stderr
    assert not marker.exists()


def test_config_check_with_a_group_runs_no_shell(tmp_path):
    marker = tmp_path / "pwned"
    site = site_file(tmp_path, f"@x';touch${{IFS}}{marker};'")
    out = fleetctl("config", "check", site, tmp_path=tmp_path)
    assert out.returncode == 3 and "resolved only in a NODESET given on the command line" in out.stderr, out.stderr
    assert not marker.exists()


@pytest.mark.parametrize("nodes", ["gpu[1-9999999]", "../../../../tmp/x"])
def test_config_check_refuses_huge_sets_and_bad_names_quickly(tmp_path, nodes):
    out = fleetctl("config", "check", site_file(tmp_path, nodes), tmp_path=tmp_path)
    assert out.returncode == 3 and "node_classes[0].nodes" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_exec_refuses_a_huge_set(tmp_path):
    out = fleetctl("--site", site_file(tmp_path, "n[1-2]"), "exec", "gpu[1-9999999]", "--", "true",
                   tmp_path=tmp_path)
    assert out.returncode == 3 and "more than 100,000 nodes" in out.stderr, out.stderr
