"""The node's state file under concurrent runs (Prolog and HealthCheck at once) and the kernel-log
acknowledgement watermark (an Xid repaired by a GPU reset, signed off by an operator or `--resume`)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

from fleetctl.checks.payload.common import load_state, merge_state, save_state
from fleetctl.checks.payload.xid import check_xids


def _writer(path: str, key: str, rounds: int) -> None:
    for i in range(rounds):
        before = {"nodes": {"n1": {}}}
        after = {"nodes": {"n1": {key: i}}}
        assert save_state(path, before, after) is None


def test_concurrent_runs_keep_every_update(tmp_path):
    path = str(tmp_path / "state.json")
    procs = [multiprocessing.Process(target=_writer, args=(path, f"k{p}", 30)) for p in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    state = load_state(path)
    assert state == {"nodes": {"n1": {f"k{p}": 29 for p in range(6)}}}
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".state.")]  # no temp file left


def test_merge_keeps_the_other_writers_keys_and_applies_deletions():
    current = {"a": 1, "b": {"x": 1, "y": 2}, "c": 3}
    before = {"a": 1, "b": {"x": 1}, "c": 3}
    after = {"a": 2, "b": {"x": 5}}
    assert merge_state(current, before, after) == {"a": 2, "b": {"x": 5, "y": 2}}


def test_state_file_that_is_not_a_regular_file_or_too_large_is_ignored(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert load_state(str(fifo)) == {}  # would hang a Prolog if opened blocking
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"x": "y" * (2 << 20)}))
    assert load_state(str(big)) == {}
    target = tmp_path / "target.json"
    target.write_text('{"secret": 1}')
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert load_state(str(link)) == {}


def test_planted_temp_link_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "state.json.tmp").symlink_to(victim)  # the old fixed temp name
    assert save_state(str(tmp_path / "state.json"), {}, {"a": 1}) is None
    assert victim.read_text() == "keep"
    assert load_state(str(tmp_path / "state.json")) == {"a": 1}


def _xid_line(when: float, xid: int = 79) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when))
    return (f"{stamp},000000+00:00 NVRM: Xid (PCI:0000:5d:00): {xid}, pid=1234, name=python3, "
            "GPU has fallen off the bus.\n")


def _xid_status(log, state, **extra) -> tuple[str, dict]:
    args = {"node": "n1", "kernel_log": str(log), "boot_id": "b1", **extra}
    results = {r["code"]: r for r in check_xids(args, None, state)}
    worst = "fail" if any(r["status"] == "fail" for r in results.values()) else "ok"
    return worst, results


def test_acknowledged_xids_stop_failing_and_new_ones_count_again(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(_xid_line(time.time() - 120))
    state: dict = {}
    assert _xid_status(log, state)[0] == "fail"
    # another node's acknowledgement does not apply here
    assert _xid_status(log, state, ack_kernel_log={"by": "x", "nodes": ["n2"]})[0] == "fail"
    worst, results = _xid_status(log, state, ack_kernel_log={"by": "fleetctl audit --resume", "nodes": ["n1"]})
    assert worst == "ok"
    assert results["xid.scan"]["evidence"]["acknowledged"]["by"] == "fleetctl audit --resume"
    assert "acknowledged by fleetctl audit --resume" in results["xid.scan"]["message"]
    assert _xid_status(log, state)[0] == "ok"  # the watermark stays in the node's state
    time.sleep(0.01)
    with open(log, "a") as f:
        f.write(_xid_line(time.time() + 1))
    assert _xid_status(log, state)[0] == "fail"


def test_a_damaged_acknowledgement_hides_nothing(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(_xid_line(time.time() - 60))
    for bad in ({"time": time.time() + 86400, "by": "x"}, {"time": "soon"}, {"time": True}, "junk",
                {"time": float("nan")}):
        assert _xid_status(log, {"kernel_log_ack": bad})[0] == "fail", bad
