"""`fleetctl job watch` in-process on progress files written by the real writer."""

from __future__ import annotations

import json
import time

from fleetctl.cli import run
from fleetctl.errors import EXIT_ERROR, EXIT_OK, EXIT_WARNINGS
from fleetctl.lens.eventlog import read_events
from fleetctl.recovery.progress import Progress


def test_watch_once_writes_a_hang_event_and_says_so_in_its_exit_status(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
    ranks = [Progress(str(tmp_path), "77", r, node=f"node{r + 1}", interval_s=0.05) for r in range(2)]
    for p in ranks:
        for it in range(20):
            p.compute_done()
            p.step(it)
        p.close()
    events = tmp_path / "events.jsonl"
    # just ran: no hang (compute times of microseconds differ by chance: no straggler judged here)
    assert run(["--format", "json", "job", "watch", "77", "--dir", str(tmp_path), "--events", str(events),
                "--once", "--straggler-pct", "1000"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["records"] == []
    time.sleep(0.3)  # both ranks stopped writing (closed), past a threshold of 1 x the median + 0 s
    # no rank stands out (both stopped): nothing until 3 x the threshold, then one event naming no rank;
    # each --once run takes over the event still open instead of opening it again
    for _ in range(2):
        rc = run(["--format", "json", "job", "watch", "77", "--dir", str(tmp_path), "--events", str(events),
                  "--once", "--hang-factor", "1", "--hang-floor", "0", "--straggler-pct", "1000"])
        out = json.loads(capsys.readouterr().out)
        assert rc == EXIT_WARNINGS and out["open"][0]["evidence"]["culprit_unknown"]
    assert [e["metric"] for e in read_events(events)] == ["hang"]


def test_watch_refuses_a_bad_job_id_and_a_missing_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FLEETCTL_PROGRESS_DIR", raising=False)
    assert run(["job", "watch", "77", "--once"]) == EXIT_ERROR
    assert "no progress directory" in capsys.readouterr().err
    assert run(["job", "watch", "../../etc", "--dir", str(tmp_path), "--once"]) == EXIT_ERROR
    assert "job id" in capsys.readouterr().err
