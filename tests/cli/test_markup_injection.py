"""Untrusted strings printed by the human views (issue 20, defect 7): a process name `x, [/b]` in an
Xid line, a snapshot directory `ckpt[/b]`, registry entries, manifest reasons, LATEST, audit verdicts.
Each used to raise rich's MarkupError (a traceback) in explain, act run, snapshot list/verify/restore
and spares; now each prints as itself, on one line, bounded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fleetctl.cli import run
from fleetctl.snapshot import manifest, registry

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from actfixtures import audit_report  # noqa: E402
from snapfixtures import make_snapshot  # noqa: E402

HOSTILE = "x, [/b] [red]y[/red] [/] \x1b[31mz\nw"


def _clean(out: str) -> None:
    assert "Traceback" not in out and "MarkupError" not in out and "\x1b[31m" not in out, out


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_LAB_DIR", str(tmp_path / "nolab"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    path = tmp_path / "site.toml"
    path.write_text('[cluster]\nname = "t"\n[[node_classes]]\nname = "c"\nnodes = "node[1-4]"\n'
                    f'[act]\nstate_dir = "{tmp_path / "act"}"\n'
                    '[[act.policies]]\nname = "p[/b]"\nsource = "audit"\ncodes = ["xid.*"]\n'
                    'actions = ["drain"]\n')
    monkeypatch.setenv("FLEETCTL_SITE", str(path))
    return path


def _report(tmp_path) -> Path:
    report = audit_report({"node2": "xid.79"})
    result = report["nodes"][0]["results"][0]
    result["message"] = f"GPU has fallen off the bus (process {HOSTILE})"
    result["evidence"] = {"line": f"NVRM: Xid (PCI:0000:1b:00): 79, pid=7, name={HOSTILE}"}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def test_explain_prints_hostile_evidence_as_text(tmp_path, site, capsys):
    assert run(["explain", "node2:xid.79", "--report", str(_report(tmp_path)), "--no-slurm"]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "x, [/b] [red]y[/red]" in out


def test_act_run_prints_hostile_decisions_as_text(tmp_path, site, capsys, monkeypatch):
    import fleetctl.slurm as slurm

    from actfixtures import MemSlurm

    monkeypatch.setattr(slurm, "backend_for_site", lambda site, **kw: MemSlurm(["node1", "node2"]))
    code = run(["act", "run", "--once", "--dry-run", "--report", str(_report(tmp_path))])
    out = capsys.readouterr().out
    _clean(out)
    assert code in (0, 1) and "[p[/b]]" in out  # 1: the budget refuses a drain of half the fleet


@pytest.fixture
def hostile_snapshots(tmp_path, monkeypatch):
    reg = tmp_path / "registry"
    reg.mkdir()
    monkeypatch.setenv(registry.ENV_REGISTRY, str(reg))
    root = tmp_path / "ckpt[/b]"
    make_snapshot(root, 3)
    path = make_snapshot(root, 4)
    doc = json.loads((path / manifest.MANIFEST).read_text())
    doc["reason"] = HOSTILE
    (path / manifest.MANIFEST).write_text(json.dumps(doc))
    (root / "step_4" / "__0_0.distcp").write_bytes(b"changed")  # verify names it: size differs
    (reg / "12.json").write_text(json.dumps({"job_id": "12", "directory": str(root), "world_size": 2}))
    (reg / "13.json").write_text(json.dumps({"job_id": "13", "directory": f"/nonexistent/{HOSTILE}"}))
    return root


@pytest.mark.parametrize("argv", [["snapshot", "list"], ["snapshot", "list", "12"],
                                  ["snapshot", "verify", "12"], ["snapshot", "prune", "12", "--dry-run"],
                                  ["snapshot", "restore", "12", "--dry-run"]])
def test_snapshot_views_print_hostile_names_as_text(hostile_snapshots, capsys, argv, monkeypatch):
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
    code = run(argv)
    captured = capsys.readouterr()
    _clean(captured.out + captured.err)
    assert code in (0, 2), captured.err


def test_a_hostile_latest_is_a_warning_printed_as_text(hostile_snapshots, capsys):
    (hostile_snapshots / "LATEST").write_text(HOSTILE)
    assert run(["snapshot", "list", str(hostile_snapshots)]) == 0
    captured = capsys.readouterr()
    _clean(captured.out + captured.err)
    assert "does not name a snapshot" in captured.err


def test_spares_status_prints_hostile_verdicts_as_text(tmp_path, site, capsys, monkeypatch):
    import fleetctl.cli.spares.status as cli_spares
    from fleetctl.spares import SparePool, SparesConfig

    from actfixtures import MemSlurm

    slurm_ = MemSlurm(["node1", "node2"])
    slurm_.res["fleetctl-spares"] = ["node1"]
    state = tmp_path / "spares"
    state.mkdir()
    (state / "audits.json").write_text(json.dumps({"node1": {"status": HOSTILE, "time": 1.0}}))
    monkeypatch.setattr(cli_spares, "pool", lambda app, d: (slurm_, SparePool(
        slurm_, SparesConfig(state_dir=str(state)))))
    run(["spares", "status"])
    captured = capsys.readouterr()
    _clean(captured.out + captured.err)
    assert "[red]y[/red]" in captured.out.replace("\n", "")


def test_info_messages_are_plain_text(tmp_path, capsys, monkeypatch):
    """app.info prints paths a user chose (`requested a snapshot of ckpt[/b]`)."""
    reg = tmp_path / "registry"
    reg.mkdir()
    monkeypatch.setenv(registry.ENV_REGISTRY, str(reg))
    root = tmp_path / "ckpt[/b]"
    root.mkdir(parents=True)
    assert run(["snapshot", "take", str(root)]) == 0
    captured = capsys.readouterr()
    _clean(captured.out + captured.err)
    assert "ckpt[/b]" in captured.err


def test_long_untrusted_text_is_bounded():
    from fleetctl.cli.app import esc

    assert len(esc("[" * 100_000, 500)) < 1100 and "\n" not in esc("a\nb")
    os.environ.pop("NOPE", None)
