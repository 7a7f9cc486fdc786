"""`fleetctl lens status/events/stop/run` in-process, without a coordinator: state directory
views, the event log, exit codes, bad input as one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetctl.cli import run
from fleetctl.lens.eventlog import EventLog

ROOT = Path(__file__).resolve().parents[2]


def record(i: int, kind="open", severity="critical", t="2026-12-01T06:00:00.000Z"):
    return {"v": 1, "id": f"ev-20261201T060000-{i:04d}", "kind": kind, "time": t,
            "state": "closed" if kind == "close" else "open",
            "element": {"type": "link", "id": "leaf1--spine2", "direction": "leaf1->spine2"},
            "metric": "loss", "severity": severity, "confidence": 0.9, "evidence": {},
            "first_seen": t, "last_seen": t, "flap": None,
            "jobs": [{"job_id": "12", "user": "alice", "nodes": "node[1-2]",
                      "partition": "debug"}]}


def test_status_without_a_coordinator_is_exit_3(tmp_path, capsys):
    rc = run(["--format", "json", "lens", "status", "--state-dir", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 3 and doc["running"] is False and doc["open_events"] == []
    assert run(["lens", "status", "--state-dir", str(tmp_path), "--no-color"]) == 3
    assert "not running" in capsys.readouterr().out


def test_events_views(tmp_path, capsys):
    log = EventLog(tmp_path / "events.jsonl")
    log.append(record(1))
    log.append(record(2))
    log.append(record(2, "close", t="2026-12-01T06:00:05.000Z"))
    assert run(["--format", "json", "lens", "events", "--state-dir", str(tmp_path)]) == 0
    events = json.loads(capsys.readouterr().out)["events"]
    assert [(e["id"][-4:], e["state"]) for e in events] == [("0001", "open"), ("0002", "closed")]
    assert run(["--format", "json", "lens", "events", "--open", "--state-dir", str(tmp_path)]) == 0
    assert [e["id"][-4:] for e in json.loads(capsys.readouterr().out)["events"]] == ["0001"]
    assert run(["--format", "json", "lens", "events", "--since", "2026-12-01T06:00:03Z",
                "--state-dir", str(tmp_path)]) == 0
    assert [e["id"][-4:] for e in json.loads(capsys.readouterr().out)["events"]] == ["0002"]
    assert run(["lens", "events", "--state-dir", str(tmp_path), "--no-color"]) == 0
    assert "leaf1->spine2" in capsys.readouterr().out
    # status lists the open event (critical: exit 3 still, nothing running)
    run(["--format", "json", "lens", "status", "--state-dir", str(tmp_path)])
    assert len(json.loads(capsys.readouterr().out)["open_events"]) == 1


def test_bad_since_is_one_line(tmp_path, capsys):
    assert run(["lens", "events", "--since", "yesterday-ish", "--state-dir", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("fleetctl: error: --since 'yesterday-ish'") and "Traceback" not in err


def test_stop_when_nothing_runs(tmp_path, capsys):
    assert run(["--format", "json", "lens", "stop", "--state-dir", str(tmp_path)]) == 1
    assert json.loads(capsys.readouterr().out)["running"] is False


def test_status_of_a_stale_pid_file_is_not_running(tmp_path, capsys):
    (tmp_path / "lens.pid").write_text(f"{os.getpid()} 1\n")  # our pid, wrong start time
    assert run(["--format", "json", "lens", "status", "--state-dir", str(tmp_path)]) == 3
    assert json.loads(capsys.readouterr().out)["running"] is False


def test_run_needs_two_nodes(tmp_path, capsys):
    site = ROOT / "site_configs" / "lab-example.toml"
    rc = run(["--site", str(site), "lens", "run", "--foreground", "--state-dir", str(tmp_path),
              "node1"])
    assert rc == 3 and "at least two" in capsys.readouterr().err


def test_lens_is_a_command():
    assert run(["lens", "--help"]) == 0


def _ignore_sigint():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_follow_stops_on_sigint_and_sigterm_even_when_started_with_sigint_ignored(tmp_path):
    """A command started in the background by a non-interactive shell (cron, CI) inherits SIGINT
    ignored; `lens events --follow` must still stop on it (and on SIGTERM) and print what it had."""
    import signal
    import subprocess
    import sys
    import time

    EventLog(tmp_path / "events.jsonl").append(record(1))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for sig in (signal.SIGINT, signal.SIGTERM):
        p = subprocess.Popen([sys.executable, "-m", "fleetctl", "--format", "json", "lens", "events",
                              "--follow", "--state-dir", str(tmp_path)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ignore_sigint)
        try:
            assert json.loads(p.stdout.readline())["id"].endswith("0001")  # the backlog: following
            time.sleep(0.3)
            p.send_signal(sig)
            out, err = p.communicate(timeout=30)
        finally:
            p.kill()  # never left behind when the signal was not honoured
            p.wait()
        assert p.returncode == 0, err
