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


# ---------------------------------------------------------------- hostile state directories
# (docs/security.md, "lens (issue 20 ...)"): every file lens's CLI reads may have been planted.

def _fleetctl(args, timeout=30):
    """fleetctl in a child process: a hang is a TimeoutExpired (a bounded wait), not a stuck test."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], env=env, text=True,
                          capture_output=True, timeout=timeout)


def _write_lines(path, recs):
    with open(path, "a") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")


def test_deep_json_in_the_state_directory_is_one_line(tmp_path, capsys):
    (tmp_path / "status.json").write_text("[" * 60_000)
    rec = record(1)
    rec["evidence"] = {"deep": json.loads("[" * 500 + "]" * 500)}  # valid JSON, absurd nesting
    _write_lines(tmp_path / "events.jsonl", [rec, record(2)])
    assert run(["--format", "json", "lens", "status", "--state-dir", str(tmp_path)]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert "nested deeper" in doc["error"] and doc["running"] is False
    assert run(["lens", "status", "--state-dir", str(tmp_path), "--no-color"]) == 3
    assert "nested deeper" in capsys.readouterr().out
    assert run(["--format", "json", "lens", "events", "--state-dir", str(tmp_path)]) == 0
    assert [e["id"][-4:] for e in json.loads(capsys.readouterr().out)["events"]] == ["0002"]


def test_fifos_in_the_state_directory_never_hang(tmp_path):
    for name in ("status.json", "lens.pid", "events.jsonl", "events.jsonl.lock"):
        os.mkfifo(tmp_path / name)
    r = _fleetctl(["--format", "json", "lens", "status", "--state-dir", str(tmp_path)])
    doc = json.loads(r.stdout)
    assert r.returncode == 3 and "not a regular file" in doc["error"] and "Traceback" not in r.stderr
    r = _fleetctl(["--format", "json", "lens", "events", "--state-dir", str(tmp_path)])
    assert r.returncode == 0 and json.loads(r.stdout)["events"] == []
    r = _fleetctl(["--format", "json", "lens", "stop", "--state-dir", str(tmp_path)])
    assert r.returncode == 1 and json.loads(r.stdout)["running"] is False


def test_records_the_validator_accepts_render(tmp_path, capsys, monkeypatch):
    """An int job_id or a job without one: either the validator refuses the record (it is skipped
    and counted) or the renderers print it; never a traceback."""
    monkeypatch.setenv("COLUMNS", "250")
    odd = [record(1), record(2), record(3)]
    odd[0]["jobs"] = [{"job_id": 12, "user": "alice"}]
    odd[1]["jobs"] = [{"user": "alice", "nodes": "node1"}]
    odd[2]["element"] = {"type": "link", "id": "leaf1--spine2", "direction": None}
    _write_lines(tmp_path / "events.jsonl", odd)
    for fmt in ("human", "json"):
        for cmd in ("events", "status"):
            rc = run(["--format", fmt, "lens", cmd, "--state-dir", str(tmp_path), "--no-color"])
            assert rc == (0 if cmd == "events" else 3)
            out = capsys.readouterr().out
            assert "ev-20261201T060000-0003" in out and "0001" not in out and "0002" not in out


HOSTILE = "a[/b]b[red]c\x1b]0;owned\x07d\x1b[2Je\rf\u202eg\nh"


def _hostile_state(tmp_path):
    """A state directory whose every string is hostile: status file and event log."""
    d = tmp_path / "st[red]ate[bold]\x1b[2J"
    d.mkdir()
    rec = record(1)
    rec["element"] = {"type": "link", "id": HOSTILE, "direction": HOSTILE}
    rec["jobs"] = [{"job_id": HOSTILE, "user": HOSTILE, "nodes": HOSTILE, "partition": HOSTILE}]
    rec["evidence"] = {HOSTILE: HOSTILE}
    _write_lines(d / "events.jsonl", [rec])
    status = {"schema": "fleetctl.lens.status/1", "cluster": HOSTILE, "window_s": HOSTILE,
              "last_window": {"t_end": HOSTILE, "probes": HOSTILE, "set_aside": HOSTILE},
              "agents": [{"host": HOSTILE, "alive": HOSTILE, "restarts": HOSTILE, "pps": HOSTILE,
                          "cpu_pct": HOSTILE, "overloaded": HOSTILE, "last_error": HOSTILE}],
              "clock": [{"host": HOSTILE, "offset_us": HOSTILE, "drift_ppm": HOSTILE}],
              "elements": [{"type": HOSTILE, "id": HOSTILE, "direction": HOSTILE, "loss_pct": 5,
                            "delay_p50_us": HOSTILE, "probes": HOSTILE}]}
    (d / "status.json").write_text(json.dumps(status))
    return d, rec


def _literal(out: str) -> None:
    assert "[/b]" in out and "[red]" in out  # printed as text, never taken as markup
    assert not any(ch in out for ch in "\x1b\x07\r\u202e"), repr(out)


def test_untrusted_strings_are_printed_literally(tmp_path, capsys, monkeypatch):
    from fleetctl.cli.app import Application
    from fleetctl.cli.lens.events import _print_record

    d, rec = _hostile_state(tmp_path)
    monkeypatch.setattr("fleetctl.lens.daemon.running_pid", lambda _p: os.getpid())
    for args in (["lens", "status"], ["lens", "events"], ["lens", "events", "--open"]):
        assert run([*args, "--state-dir", str(d), "--no-color"]) in (0, 1, 2)
        _literal(capsys.readouterr().out)
    monkeypatch.setattr("fleetctl.lens.daemon.running_pid", lambda _p: None)
    assert run(["lens", "status", "--state-dir", str(d), "--no-color"]) == 3  # the path printed
    _literal(capsys.readouterr().out)
    _print_record(Application(), rec)  # `lens events --follow`, human
    _literal(capsys.readouterr().out)
    for args in (["lens", "status"], ["lens", "events"]):  # JSON keeps the values, escaped
        run(["--format", "json", *args, "--state-dir", str(d)])
        out = capsys.readouterr().out
        assert HOSTILE in out.replace("\\u001b", "\x1b").replace("\\u0007", "\x07") \
            .replace("\\r", "\r").replace("\\u202e", "\u202e").replace("\\n", "\n") \
            or HOSTILE in json.dumps(json.loads(out), ensure_ascii=False)
        assert "\x1b" not in out


def test_a_planted_pid_file_is_a_clear_refusal(tmp_path):
    import pytest

    from fleetctl.errors import DataError
    from fleetctl.lens.daemon import PidLock

    os.mkfifo(tmp_path / "fifo.pid")
    (tmp_path / "link.pid").symlink_to(tmp_path / "victim")
    for name, why in (("fifo.pid", "not a regular file"), ("link.pid", "cannot open")):
        with pytest.raises(DataError, match=why):
            PidLock(tmp_path / name).acquire()
    assert not (tmp_path / "victim").exists()
