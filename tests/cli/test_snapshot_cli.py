"""`fleetctl snapshot` in-process on hand-made snapshot directories (no torch, no Slurm needed).
The library and the CLI against a real job: tests/unit/test_snapshot_torch.py and
tests/integration/test_snapshot_lab.py."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from fleetctl.cli import run
from fleetctl.snapshot import layout, manifest, registry

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from snapfixtures import flip_byte, make_snapshot  # noqa: E402


@pytest.fixture
def reg(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_LAB_DIR", str(tmp_path / "nolab"))
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
    path = tmp_path / "registry"
    path.mkdir()
    monkeypatch.setenv(registry.ENV_REGISTRY, str(path))
    return path


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_verify_ok_and_json(tmp_path, reg, capsys):
    make_snapshot(tmp_path / "s", 5)
    make_snapshot(tmp_path / "s", 10)
    registry.register("77", tmp_path / "s", 2)
    assert run(["--format", "json", "snapshot", "verify", "77"]) == 0
    data = _json(capsys)
    assert data["ok"] and data["restore_would_use"] == 10 and data["job_id"] == "77"
    assert [s["step"] for s in data["snapshots"]] == [10, 5]


@pytest.mark.parametrize("damage, message", [
    (lambda p: flip_byte(p / "__0_0.distcp"), "__0_0.distcp: sha256"),
    (lambda p: (p / "__1_0.distcp").unlink(), "missing shard __1_0.distcp (rank 1)"),
    (lambda p: (p / "MANIFEST.json").unlink(), "no MANIFEST.json: not a complete snapshot"),
])
def test_verify_refuses_a_damaged_snapshot_with_exit_2(tmp_path, reg, capsys, damage, message):
    root = tmp_path / "s"
    make_snapshot(root, 5)
    damage(make_snapshot(root, 10))
    assert run(["snapshot", "verify", str(root / "step_10")]) == 2
    out = capsys.readouterr().out
    assert "FAIL" in out and message in out
    assert run(["--format", "json", "snapshot", "verify", str(root)]) == 2
    data = _json(capsys)
    assert not data["ok"] and data["restore_would_use"] == 5
    assert message in data["snapshots"][0]["problems"][0]


def test_verify_refuses_a_tmp_directory_and_an_empty_root(tmp_path, reg, capsys):
    tmp = make_snapshot(tmp_path / "s", 3, committed=False)
    assert run(["snapshot", "verify", str(tmp)]) == 2
    assert "unfinished or interrupted write" in capsys.readouterr().out
    assert run(["snapshot", "verify", str(tmp_path / "s")]) == 2
    assert "no committed snapshot" in capsys.readouterr().out


def test_bad_targets_are_one_line_errors(tmp_path, reg, capsys):
    assert run(["snapshot", "verify", "123"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("fleetctl: error: job 123: no registry entry") and "Traceback" not in err
    assert run(["snapshot", "list", str(tmp_path / "missing")]) == 3
    assert "neither a job id nor an existing snapshot directory" in capsys.readouterr().err
    (reg / "9.json").write_text("{not json")
    assert run(["snapshot", "take", "9"]) == 3
    assert "9.json: registry entry is not valid JSON" in capsys.readouterr().err
    assert run(["snapshot", "restore", "../etc"]) == 3
    assert "is not a Slurm job id" in capsys.readouterr().err


def test_list_jobs_and_snapshots(tmp_path, reg, capsys):
    make_snapshot(tmp_path / "s", 5)
    make_snapshot(tmp_path / "s", 8, committed=False)
    registry.register("42", tmp_path / "s", 2)
    assert run(["--format", "json", "snapshot", "list"]) == 0
    assert _json(capsys)["jobs"] == [{"job_id": "42", "directory": str(tmp_path / "s"), "problem": None}]
    assert run(["--format", "json", "snapshot", "list", "42"]) == 0
    data = _json(capsys)
    assert data["latest"] == 5 and [(r["step"], r["state"]) for r in data["snapshots"]] == \
        [(8, "partial"), (5, "ok")]
    assert run(["snapshot", "list", "42"]) == 0
    assert "LATEST" in capsys.readouterr().out


def test_take_writes_a_request_and_waits_for_its_snapshot(tmp_path, reg, capsys):
    root = tmp_path / "s"
    make_snapshot(root, 5)
    registry.register("42", root, 2)
    assert run(["--format", "json", "snapshot", "take", "42"]) == 0
    first = _json(capsys)
    assert layout.take_request(root)["id"] == first["request"]

    def job():  # plays the Snapshotter's part: claims the request, publishes a snapshot answering it
        while (request := layout.take_request(root)) is None:
            time.sleep(0.05)
        path = make_snapshot(root, 6, latest=False)
        doc = manifest.load(path)
        doc["request"] = request["id"]
        manifest.write(path, doc)
        layout.write_latest(root, 6)

    worker = threading.Thread(target=job)
    worker.start()
    assert run(["--format", "json", "snapshot", "take", "42", "--wait", "--timeout", "20"]) == 0
    worker.join()
    data = _json(capsys)
    assert data["snapshot"] == {"step": 6, "path": str(root / "step_6")}


def test_take_wait_times_out_with_a_hint(tmp_path, reg, capsys):
    (tmp_path / "s").mkdir()
    assert run(["snapshot", "take", str(tmp_path / "s"), "--wait", "--timeout", "0.3"]) == 3
    err = capsys.readouterr().err
    assert "no snapshot answered request" in err and "has not picked the request up" in err


def test_restore_without_a_verified_snapshot_refuses(tmp_path, reg, capsys):
    root = tmp_path / "s"
    flip_byte(make_snapshot(root, 5) / "rank_0.pt")
    registry.register("42", root, 2)
    assert run(["snapshot", "restore", "42"]) == 3
    err = capsys.readouterr().err
    assert "no verified snapshot" in err and "step 5: rank_0.pt: sha256" in err


def test_restore_dry_run_names_the_fallback(tmp_path, reg, capsys):
    root = tmp_path / "s"
    make_snapshot(root, 5)
    (make_snapshot(root, 10) / "MANIFEST.json").unlink()
    registry.register("42", root, 2)
    assert run(["--format", "json", "snapshot", "restore", "42", "--dry-run"]) == 0
    data = _json(capsys)
    assert data["step"] == 5 and not data["requeued"]
    assert data["skipped"][0]["step"] == 10 and "no MANIFEST.json" in data["skipped"][0]["reason"]


def test_prune(tmp_path, reg, capsys):
    root = tmp_path / "s"
    for step in (1, 2, 3):
        make_snapshot(root, step)
    assert run(["--format", "json", "snapshot", "prune", str(root), "--keep", "1", "--dry-run"]) == 0
    assert sorted(Path(p).name for p in _json(capsys)["removed"]) == ["step_1", "step_2"]
    assert (root / "step_1").exists()
    assert run(["snapshot", "prune", str(root), "--keep", "1"]) == 0
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "step_3"]


def test_interval_from_inputs_and_from_the_job(tmp_path, reg, capsys):
    assert run(["--format", "json", "snapshot", "interval", "--cost", "2", "--mtbf-hours", "1",
                "--restart", "60"]) == 0
    data = _json(capsys)
    assert data["young_s"] == pytest.approx(120.0) and data["daly_s"] == pytest.approx((2 * 2 * 3660) ** 0.5, abs=1e-3)
    root = tmp_path / "s"
    root.mkdir()
    layout.write_status(root, {"cost_s": 0.5, "mtbf_s": 3600.0, "mtbf_source": "test", "nodes": 2})
    assert run(["--format", "json", "snapshot", "interval", str(root)]) == 0
    data = _json(capsys)
    assert data["inputs"]["cost_s"] == 0.5 and data["inputs"]["mtbf_s"] == 3600.0
    assert data["young_s"] == pytest.approx(60.0)
    assert run(["--format", "json", "snapshot", "interval", str(root), "--node-mtbf-hours", "10"]) == 0
    assert _json(capsys)["inputs"]["mtbf_s"] == pytest.approx(5 * 3600)  # 10 h / the job's 2 nodes
    assert run(["snapshot", "interval", "--cost", "nan"]) == 3


def test_no_request_needs_signal(tmp_path, reg, capsys):
    (tmp_path / "s").mkdir()
    assert run(["snapshot", "take", str(tmp_path / "s"), "--no-request"]) == 3
    assert "--no-request needs --signal" in capsys.readouterr().err
    assert run(["snapshot", "take", str(tmp_path / "s"), "--signal"]) == 3
    assert "--signal needs a job id" in capsys.readouterr().err
    assert not (tmp_path / "s" / "REQUEST").exists()  # refused before any side effect


def test_a_long_verdict_line_is_never_folded_when_stdout_is_not_a_terminal(tmp_path, capsys):
    """`verify ... | grep FAIL` must see the whole line: rich folds at 80 columns unless told not to
    (a deep snapshot path once split 'no MANIFEST.json' over two lines)."""
    root = tmp_path / ("d" * 120) / "s"
    make_snapshot(root, 10)
    (root / "step_10" / "MANIFEST.json").unlink()
    assert run(["snapshot", "verify", str(root / "step_10")]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("FAIL ") and line.endswith("no MANIFEST.json: not a complete snapshot")
               for line in lines), lines
