"""The Snapshotter with real torch: 2 processes, gloo on localhost, DDP, a small model.

A run snapshotted, killed (SIGKILL of one rank) and restored ends with parameters bit-identical to an
uninterrupted run with the same seed; a snapshot interrupted mid-write never becomes LATEST.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs torch: scripts/install; a missing torch must fail there)
else:
    torch = pytest.importorskip("torch")

from fleetctl.snapshot import catalog, layout, manifest  # noqa: E402

TRAIN = Path(__file__).resolve().parent.parent / "snapshot_train.py"
REPO = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(snapdir: Path, *args: str, world: int = 2, timeout: float = 120) -> list[int]:
    """Run the training script on `world` local ranks; return their exit codes."""
    port = _port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        env.pop("SLURM_JOB_ID", None)
        procs.append(subprocess.Popen([sys.executable, str(TRAIN), "--dir", str(snapdir), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()  # a peer waiting on a dead rank
            p.wait()
        codes.append(p.returncode)
    return codes


def params(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def assert_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key  # bit for bit, not approximately


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("reference")
    assert launch(d, "--steps", "30", "--out", str(d / "final.pt")) == [0, 0]
    assert not layout.scan(d)  # no snapshot was asked for
    return params(d / "final.pt")


def test_snapshot_kill_restore_is_bit_identical(tmp_path, reference):
    snap = tmp_path / "snap"
    codes = launch(snap, "--steps", "30", "--every", "6", "--die-at", "20", "--die-rank", "1")
    assert codes[1] == -9 and codes[0] != 0  # rank 1 killed, rank 0 failed on its peer
    latest = layout.read_latest(snap)
    assert latest in (11, 17)  # 17's write may not have been confirmed before the kill
    assert catalog.choose(snap).step == latest
    codes = launch(snap, "--steps", "30", "--out", str(tmp_path / "final.pt"))
    assert codes == [0, 0]
    assert_identical(params(tmp_path / "final.pt"), reference)


def test_restore_falls_back_past_a_corrupted_snapshot(tmp_path, reference):
    snap = tmp_path / "snap"
    assert launch(snap, "--steps", "25", "--every", "6", "--sync") == [0, 0]
    assert layout.read_latest(snap) == 23
    shard = next(p for p in (snap / "step_23").iterdir() if p.name.endswith(".distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    shard.write_bytes(bytes(data))
    verdict = manifest.verify(snap / "step_23")
    assert not verdict.ok and "does not match" in verdict.reason
    assert launch(snap, "--steps", "30", "--out", str(tmp_path / "final.pt")) == [0, 0]
    assert_identical(params(tmp_path / "final.pt"), reference)  # resumed from step 17, not 23


def test_interrupted_write_never_becomes_latest(tmp_path, reference):
    snap = tmp_path / "snap"
    # Rank 0 is SIGKILLed right after the async save of step 11 started: its write is in flight.
    codes = launch(snap, "--steps", "30", "--every", "6", "--width", "4096",
                   "--exit-after-snapshot", "11")
    assert codes[0] == -9
    assert layout.read_latest(snap) == 5
    assert not (snap / "step_11").exists()  # at most step_11.tmp, which is never a snapshot
    assert catalog.choose(snap).step == 5
    listing = catalog.describe(snap)
    assert [r["state"] for r in listing["snapshots"] if r["step"] == 11] in ([], ["partial"])


def test_request_file_triggers_a_snapshot_on_every_rank(tmp_path):
    snap = tmp_path / "snap"
    snap.mkdir()
    request_id = layout.write_request(snap)
    assert launch(snap, "--steps", "5") == [0, 0]
    assert layout.read_latest(snap) == 0  # taken at the first boundary after the request
    verdict = manifest.verify(snap / "step_0")
    assert verdict.ok, verdict.reason
    assert verdict.manifest["request"] == request_id and verdict.manifest["world_size"] == 2
    assert {manifest.rank_state_name(0), manifest.rank_state_name(1)} <= set(verdict.manifest["files"])
    assert not (snap / layout.REQUEST).exists()


def _single(tmp_path, **options):
    from fleetctl.snapshot import Snapshotter

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Snapshotter(model, opt, directory=tmp_path / "s", keep=2, **options)


def test_sigusr2_asks_for_a_snapshot_in_process(tmp_path):
    import signal

    snap = _single(tmp_path, periodic=False)
    try:
        assert snap.step(0) is None
        os.kill(os.getpid(), signal.SIGUSR2)
        assert snap.step(1) == 1
        snap.wait()
        assert manifest.verify(tmp_path / "s" / "step_1").manifest["reason"] == "signal"
    finally:
        snap.close()
    assert signal.getsignal(signal.SIGUSR2) is not snap._on_signal


def test_periodic_snapshots_follow_the_interval_and_keep_n(tmp_path):
    snap = _single(tmp_path, interval_s=0.0, signal_number=None)
    for it in range(4):
        assert snap.step(it) == it
    snap.close()
    root = tmp_path / "s"
    assert layout.read_latest(root) == 3
    assert sorted(e.step for e in layout.scan(root)) == [2, 3]  # keep=2
    assert manifest.verify(root / "step_3").manifest["reason"] == "periodic"
    status = layout.read_status(root)
    assert status["step"] == 3 and status["bytes"] > 0 and status["blocking_s"] > 0
    assert snap.last["step"] == 3 and snap.last["total_s"] >= snap.last["blocking_s"]


def test_no_snapshot_without_a_trigger_and_a_fresh_start(tmp_path):
    snap = _single(tmp_path, periodic=False, signal_number=None)
    assert snap.restore() is None
    assert all(snap.step(it) is None for it in range(5))
    snap.close()
    assert layout.scan(tmp_path / "s") == []


def test_the_spank_option_names_the_directory(tmp_path, monkeypatch):
    """`srun --fleet-snapshot=DIR` puts FLEET_SNAPSHOT_DIR in the task's environment; the library
    takes it when neither directory= nor FLEETCTL_SNAPSHOT_DIR says otherwise."""
    from fleetctl.snapshot import Snapshotter, SnapshotError

    model = torch.nn.Linear(4, 2)
    monkeypatch.delenv("FLEETCTL_SNAPSHOT_DIR", raising=False)
    monkeypatch.delenv("FLEET_SNAPSHOT_DIR", raising=False)
    with pytest.raises(SnapshotError, match="--fleet-snapshot"):
        Snapshotter(model, periodic=False, signal_number=None)
    monkeypatch.setenv("FLEET_SNAPSHOT_DIR", str(tmp_path / "spank"))
    snap = Snapshotter(model, periodic=False, signal_number=None)
    snap.close()
    assert snap.root == tmp_path / "spank"
    monkeypatch.setenv("FLEETCTL_SNAPSHOT_DIR", str(tmp_path / "explicit"))
    snap = Snapshotter(model, periodic=False, signal_number=None)
    snap.close()
    assert snap.root == tmp_path / "explicit"


# ---------------------------------------------------------------- hostile snapshots (issue 20)
class _Planted:
    """A pickle that runs code when loaded: what a planted DCP `.metadata` does with pickle.load."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _two_snapshots(tmp_path):
    """step_2 and step_3 (keep=2) of a single-process job; the job's model and the root."""
    snap = _single(tmp_path, interval_s=0.0, signal_number=None)
    for it in range(4):
        snap.step(it)
    snap.close()
    return tmp_path / "s"


def _replace_with_manifest(path: Path, data: bytes) -> None:
    """Replace a snapshot file and recompute its manifest entry: the snapshot still verifies."""
    import hashlib
    import json

    path.write_bytes(data)
    doc = json.loads((path.parent / "MANIFEST.json").read_text())
    doc["files"][path.name].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (path.parent / "MANIFEST.json").write_text(json.dumps(doc))


def _restore(tmp_path):
    snap = _single(tmp_path, periodic=False, signal_number=None)
    try:
        return snap.restore(), snap.restored
    finally:
        snap.close()


def test_a_planted_index_owned_by_another_user_is_never_loaded(tmp_path):
    import pickle

    root = _two_snapshots(tmp_path)
    marker = tmp_path / "pwned"
    planted = root / "step_3" / manifest.DCP_METADATA
    _replace_with_manifest(planted, pickle.dumps(_Planted(marker)))
    os.chown(planted, 54321, 54321)
    assert manifest.verify(root / "step_3").ok  # a recomputed manifest is no proof of origin
    step, info = _restore(tmp_path)
    assert step == 2 and not marker.exists()
    assert "belongs to uid 54321" in info["skipped"][0]["reason"]


def test_a_snapshot_writable_by_others_is_passed_over(tmp_path):
    root = _two_snapshots(tmp_path)
    os.chmod(root / "step_3", 0o777)
    step, info = _restore(tmp_path)
    assert step == 2 and "writable by others" in info["skipped"][0]["reason"]


def test_a_planted_index_of_the_users_own_is_refused_by_the_unpickler(tmp_path):
    """Same owner, so the ownership rule cannot tell: the restricted unpickler refuses anything but
    checkpoint-index classes, the load fails, and restore falls back (defect 24's path)."""
    import pickle

    root = _two_snapshots(tmp_path)
    marker = tmp_path / "pwned"
    _replace_with_manifest(root / "step_3" / manifest.DCP_METADATA, pickle.dumps(_Planted(marker)))
    step, info = _restore(tmp_path)
    assert step == 2 and not marker.exists()
    assert "failed to load" in info["skipped"][0]["reason"] and "refused" in info["skipped"][0]["reason"]


def test_a_snapshot_that_verifies_but_fails_to_load_falls_back(tmp_path):
    """A damaged shard whose manifest entry was recomputed (the writer's own bug, or a copy tool):
    DCP raises CheckpointException, a BaseException; restore takes the next older snapshot."""
    root = _two_snapshots(tmp_path)
    shard = next(p for p in (root / "step_3").iterdir() if p.name.endswith(".distcp"))
    _replace_with_manifest(shard, b"\0" * 7)
    step, info = _restore(tmp_path)
    assert step == 2
    assert "CheckpointException" in info["skipped"][0]["reason"] or "Error" in info["skipped"][0]["reason"]
