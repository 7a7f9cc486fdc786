"""`fleetctl explain`, `act log` and `act undo` in-process, without Slurm (explain --no-slurm)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fleetctl.cli import run

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from actfixtures import audit_report, lens_event  # noqa: E402

SITE = Path(__file__).parents[2] / "site_configs" / "lab-example.toml"


def site(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "site.toml"
    path.write_text(SITE.read_text() + f'\n[act]\nstate_dir = "{tmp_path / "act"}"\n'
                    f'lens_events = "{tmp_path / "events.jsonl"}"\n')
    monkeypatch.setenv("FLEETCTL_SITE", str(path))
    return path


def out_json(capsys):
    return json.loads(capsys.readouterr().out)


def test_explain_a_finding_and_an_event_without_slurm(tmp_path, monkeypatch, capsys):
    site(tmp_path, monkeypatch)
    report = tmp_path / "r.json"
    report.write_text(json.dumps(audit_report({"node2": "xid.79"})))
    (tmp_path / "events.jsonl").write_text(json.dumps(lens_event()) + "\n")
    assert run(["--format", "json", "explain", "node2:xid.79", "--report", str(report), "--no-slurm"]) == 0
    data = out_json(capsys)
    assert data["what"].startswith("GPU error Xid 79") and data["fleetctl"] == []
    assert "fleetctl: took no action" in data["text"]
    assert run(["explain", "ev-20261201T070000-0001", "--no-slurm"]) == 0
    text = capsys.readouterr().out
    assert "packet loss of 4.8 % on link node1:eth0--leaf1" in text and "confidence 0.97" in text


def test_bad_targets_and_unknown_actions_are_one_line_errors(tmp_path, monkeypatch, capsys):
    site(tmp_path, monkeypatch)
    assert run(["explain", "node2:xid.79", "--no-slurm"]) == 3
    assert "no audit report" in capsys.readouterr().err
    assert run(["act", "undo", "act-20261201T000000-abcdef"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("fleetctl: error: no action 'act-20261201T000000-abcdef'") and len(err.splitlines()) == 1
    assert run(["--format", "json", "act", "log"]) == 0
    assert out_json(capsys) == {"actions": []}


def test_a_bad_policy_is_a_site_error(tmp_path, monkeypatch, capsys):
    path = site(tmp_path, monkeypatch)
    path.write_text(path.read_text() + '[[act.policies]]\nname = "x"\nactions = ["format-disk"]\n')
    assert run(["act", "run", "--once"]) == 3
    assert "act.policies[0].actions: unknown or no actions" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "act" / "actions.jsonl")
