"""`fleetctl inventory` in-process: tables, views, JSON, bad input, Slurm unreachable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetctl.cli import run

ROOT = Path(__file__).resolve().parents[2]
ROCE = str(ROOT / "site_configs" / "roce-leaf-spine.toml")

DEAD_SLURM = ("ClusterName=dead\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\n"
              "AuthType=auth/none\nCredType=cred/none\nMessageTimeout=2\n"
              "NodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 Default=YES\n")


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


def test_nodes_table_without_slurm(capsys):
    assert run(["inventory", "--site", ROCE, "--no-slurm", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "roce-ls: 8 nodes" in out
    for header in ("node", "class", "slurm state", "reason", "GPUs", "NICs"):
        assert header in out
    assert "rack1-n[1-4] (4)" in out and "4 x NVIDIA L40S" in out and "mlx5_0->leaf1a, mlx5_1->leaf1b" in out
    assert out.count("mlx5_0->leaf1a") == 1  # a rack's nodes have identical rows: one row
    assert run(["inventory", "--site", ROCE, "--no-slurm", "--no-color", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert wide.count("mlx5_0->leaf1a") == 4 and "rack1-n1 " in wide


def test_nodeset_and_json(capsys):
    assert run(["--format", "json", "inventory", "rack2-n[1-2]", "--site", ROCE, "--no-slurm"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in data["nodes"]] == ["rack2-n1", "rack2-n2"]
    assert data["nodes"][0]["nics"][0]["switches"] == ["leaf2a"]
    assert data["nodes"][0]["nics"][0]["addresses"] == ["10.2.1.1"]
    assert {s["id"] for s in data["switches"]} == {"leaf2a", "leaf2b"}


def test_links_and_switches_views(capsys):
    assert run(["inventory", "--site", ROCE, "--no-slurm", "--links", "--format", "json"]) == 0
    links = json.loads(capsys.readouterr().out)["links"]
    assert len(links) == 24 and links[0]["id"] == "rack1-n1:mlx5_0--leaf1a"
    assert run(["inventory", "--site", ROCE, "--no-slurm", "--switches"]) == 0
    out = capsys.readouterr().out
    assert "6 switches" in out and "spine2" in out and "SN4700" in out


def test_bad_nodeset_is_a_usage_error(capsys):
    assert run(["inventory", "rack[1-", "--site", ROCE, "--no-slurm"]) == 3
    assert capsys.readouterr().err.startswith("fleetctl: error: invalid node set 'rack[1-'")


def test_unknown_nodes_warn(capsys):
    assert run(["inventory", "rack9-n1", "--site", ROCE, "--no-slurm"]) == 1
    assert "nodes rack9-n1 are not in the site file" in capsys.readouterr().err


def test_slurm_unreachable_shows_site_view_with_warning(tmp_path, capsys):
    (tmp_path / "slurm.conf").write_text(DEAD_SLURM)
    site = tmp_path / "site.toml"
    site.write_text(Path(ROCE).read_text().replace('conf = "/etc/slurm/slurm.conf"', 'conf = "slurm.conf"'))
    assert run(["inventory", "--site", str(site), "--format", "json"]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert len(data["nodes"]) == 8
    assert data["slurm"]["error"].startswith(f"slurmctld not reachable (SLURM_CONF={tmp_path / 'slurm.conf'})")
    assert data["warnings"][0].startswith("Slurm state unavailable, showing the site file only")


@pytest.mark.parametrize("argv", [["--help"], ["inventory", "--help"], ["config", "--help"]])
def test_help_imports_nothing_heavy(argv):
    """Start-up stays fast only while help needs no rich/paramiko/numpy/h5py (benchmarks/cli_startup.py)."""
    import subprocess
    import sys

    probe = ("import sys\nfrom fleetctl.cli import run\n"
             f"assert run({argv!r}) == 0\n"
             "print(','.join(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'rich', 'paramiko', 'numpy', 'scipy', 'h5py', 'pynvml'})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == ""
