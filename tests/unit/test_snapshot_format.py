"""The snapshot on-disk format without torch: manifest, verify, LATEST, requests, choice with fallback,
retention, registry and the Young/Daly interval."""

from __future__ import annotations

import json
import math
import os

import pytest

from fleetctl.snapshot import SnapshotError, catalog, interval, layout, manifest, registry
from snapfixtures import flip_byte, make_snapshot


def test_a_complete_snapshot_verifies(tmp_path):
    path = make_snapshot(tmp_path, 10)
    verdict = manifest.verify(path)
    assert verdict.ok and verdict.problems == [] and verdict.step == 10
    assert verdict.bytes == 5 * 4096


def test_a_flipped_byte_is_named(tmp_path):
    path = make_snapshot(tmp_path, 10)
    flip_byte(path / "__1_0.distcp")
    verdict = manifest.verify(path)
    assert not verdict.ok
    assert verdict.problems == [verdict.problems[0]]
    assert verdict.problems[0].startswith("__1_0.distcp: sha256 ") and "(corrupted)" in verdict.problems[0]
    assert manifest.verify(path, digests=False).ok  # sizes alone cannot see it


def test_a_missing_shard_is_named_with_its_rank(tmp_path):
    path = make_snapshot(tmp_path, 10)
    (path / "__1_0.distcp").unlink()
    assert manifest.verify(path).problems == ["missing shard __1_0.distcp (rank 1)"]


def test_a_missing_manifest_is_not_a_snapshot(tmp_path):
    path = make_snapshot(tmp_path, 10)
    (path / layout.MANIFEST).unlink()
    assert manifest.verify(path).problems == ["no MANIFEST.json: not a complete snapshot"]


def test_truncated_shard_unexpected_file_and_link(tmp_path):
    path = make_snapshot(tmp_path, 10)
    with open(path / "rank_0.pt", "r+b") as fh:
        fh.truncate(100)
    (path / "stray.bin").write_bytes(b"x")
    problems = manifest.verify(path).problems
    assert "rank_0.pt: 100 bytes, the manifest says 4096" in problems
    assert "file(s) not in the manifest: stray.bin" in problems
    os.symlink(path, tmp_path / "step_99")
    assert "not a directory" in manifest.verify(tmp_path / "step_99").reason


@pytest.mark.parametrize("doc, expected", [
    ("not json", "not valid JSON"),
    ("[]", "not a JSON object"),
    ('{"format": "other"}', "format is 'other'"),
    ('{"format": "fleetctl-snapshot/1", "step": -1, "world_size": 1, "files": {}}', "step is not"),
    ('{"format": "fleetctl-snapshot/1", "step": 1, "world_size": 0, "files": {}}', "world_size"),
    ('{"format": "fleetctl-snapshot/1", "step": 1, "world_size": 1, "files": {}}', "files is missing"),
    ('{"format": "fleetctl-snapshot/1", "step": 1, "world_size": 1, "files": {"../x": {}}}',
     "not a plain file name"),
    ('{"format": "fleetctl-snapshot/1", "step": 1, "world_size": 1, "files": {"a": {"size": 1, '
     '"sha256": "zz", "rank": 0}}}', "sha256 of a"),
    ('{"format": "fleetctl-snapshot/1", "step": 1, "world_size": 1, "files": {"a": {"size": 1, '
     '"sha256": "' + "0" * 64 + '", "rank": 5}}}', "rank of a is not in 0..0"),
])
def test_hostile_manifests_are_refused_with_the_reason(tmp_path, doc, expected):
    path = make_snapshot(tmp_path, 1, world=1)
    (path / layout.MANIFEST).write_text(doc)
    verdict = manifest.verify(path)
    assert not verdict.ok and expected in verdict.reason


def test_manifest_must_list_every_rank_and_the_index(tmp_path):
    path = make_snapshot(tmp_path, 3)
    doc = json.loads((path / layout.MANIFEST).read_text())
    del doc["files"]["rank_1.pt"]
    del doc["files"][".metadata"]
    (path / layout.MANIFEST).write_text(json.dumps(doc))
    problems = manifest.verify(path).problems
    assert "MANIFEST.json lists no state for rank(s) 1" in problems
    assert "MANIFEST.json lists no .metadata (the checkpoint's index)" in problems


def test_step_mismatch_between_name_and_manifest(tmp_path):
    path = make_snapshot(tmp_path, 3)
    path.rename(tmp_path / "step_4")
    assert "MANIFEST.json says step 3, the directory is step_4" in manifest.verify(tmp_path / "step_4").problems


def test_latest_round_trip_and_malformed(tmp_path):
    assert layout.read_latest(tmp_path) is None
    layout.write_latest(tmp_path, 42)
    assert (tmp_path / "LATEST").read_text() == "step_42\n" and layout.read_latest(tmp_path) == 42
    (tmp_path / "LATEST").write_text("../../etc")
    with pytest.raises(SnapshotError, match="does not name a snapshot"):
        layout.read_latest(tmp_path)
    (tmp_path / "LATEST").unlink()
    os.symlink("/etc/hostname", tmp_path / "LATEST")
    with pytest.raises(SnapshotError, match="LATEST is a symbolic link"):
        layout.read_latest(tmp_path)


def test_choose_falls_back_past_a_corrupted_newest_and_ignores_tmp(tmp_path):
    make_snapshot(tmp_path, 5)
    newest = make_snapshot(tmp_path, 10)
    make_snapshot(tmp_path, 15, committed=False)  # an interrupted write: newer, never a candidate
    assert catalog.choose(tmp_path).step == 10
    flip_byte(newest / "rank_1.pt")
    choice = catalog.choose(tmp_path)
    assert choice.step == 5
    assert choice.skipped[0]["step"] == 10 and "rank_1.pt: sha256" in choice.skipped[0]["reason"]


def test_choose_with_nothing_usable(tmp_path):
    path = make_snapshot(tmp_path, 5)
    (path / layout.MANIFEST).unlink()
    choice = catalog.choose(tmp_path)
    assert choice.step is None and "no MANIFEST.json" in choice.skipped[0]["reason"]
    with pytest.raises(SnapshotError, match="no such snapshot directory"):
        catalog.choose(tmp_path / "absent")


def test_a_committed_snapshot_newer_than_latest_is_used(tmp_path):
    # The job died between the rename (after every rank confirmed) and moving LATEST.
    make_snapshot(tmp_path, 5)
    make_snapshot(tmp_path, 10, latest=False)
    assert layout.read_latest(tmp_path) == 5
    assert catalog.choose(tmp_path).step == 10


def test_a_directory_without_manifest_is_never_taken(tmp_path):
    make_snapshot(tmp_path, 5)
    make_snapshot(tmp_path, 10, with_manifest=False)  # renamed by hand, say: still no snapshot
    assert catalog.choose(tmp_path).step == 5


def test_prune_keeps_n_and_latest_and_removes_stale_tmp(tmp_path):
    for step in (1, 2, 3, 4):
        make_snapshot(tmp_path, step, latest=False)
    layout.write_latest(tmp_path, 1)  # an operator pinned an old one
    make_snapshot(tmp_path, 0, committed=False)  # leftover of an interrupted write
    make_snapshot(tmp_path, 9, committed=False)  # a write in progress: newer than every committed one
    planned = sorted(e.path.name for e in catalog.prune_plan(tmp_path, 2))
    assert planned == ["step_0.tmp", "step_2"]
    catalog.prune(tmp_path, 2)
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "step_1", "step_3", "step_4", "step_9.tmp"]
    with pytest.raises(SnapshotError, match="keep must be at least 1"):
        catalog.prune_plan(tmp_path, 0)


def test_prune_removes_a_planted_link_without_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    root = tmp_path / "snaps"
    for step in (1, 2):
        make_snapshot(root, step)
    os.symlink(victim, root / "step_0.tmp")
    catalog.prune(root, 1)
    assert (victim / "keep.txt").exists()
    assert not os.path.lexists(root / "step_0.tmp") or os.path.islink(root / "step_0.tmp")


def test_describe_lists_states(tmp_path):
    make_snapshot(tmp_path, 5)
    bad = make_snapshot(tmp_path, 10)
    (bad / "__0_0.distcp").unlink()
    make_snapshot(tmp_path, 15, committed=False)
    rows = {r["step"]: r for r in catalog.describe(tmp_path)["snapshots"]}
    assert rows[15]["state"] == "partial" and rows[10]["state"] == "bad" and rows[5]["state"] == "ok"
    assert rows[10]["latest"]


def test_request_is_claimed_once(tmp_path):
    assert layout.take_request(tmp_path) is None
    rid = layout.write_request(tmp_path, "drain")
    got = layout.take_request(tmp_path)
    assert got == {"id": rid, "reason": "drain"}
    assert layout.take_request(tmp_path) is None
    (tmp_path / "REQUEST").write_text("garbage")  # still a request, without id
    assert layout.take_request(tmp_path) == {"id": None, "reason": "request"}
    with pytest.raises(SnapshotError, match="unknown request reason"):
        layout.write_request(tmp_path, "bogus")


def test_step_names():
    assert layout.step_name(7) == "step_7" and layout.parse_step("step_7") == 7
    assert layout.parse_step("step_7.tmp") is None and layout.parse_tmp_step("step_7.tmp") == 7
    for bad in ("step_", "step_-1", "step_1/..", "xstep_1", "step_" + "9" * 16):
        assert layout.parse_step(bad) is None
    with pytest.raises(SnapshotError):
        layout.step_name(-1)


def test_registry_maps_a_job_to_its_directory(tmp_path):
    reg, snaps = tmp_path / "reg", tmp_path / "snaps"
    reg.mkdir()
    snaps.mkdir()
    registry.register("4242", snaps, 2, str(reg))
    assert registry.lookup("4242", str(reg)) == snaps
    assert registry.resolve("4242", str(reg)) == (snaps, "4242")
    assert registry.resolve(str(snaps), str(reg)) == (snaps, None)
    assert registry.entries(str(reg)) == [{"job_id": "4242", "directory": str(snaps), "problem": None}]
    with pytest.raises(SnapshotError, match="no registry entry"):
        registry.lookup("4243", str(reg))
    with pytest.raises(SnapshotError, match="neither a job id nor an existing"):
        registry.resolve("nope/x", str(reg))


@pytest.mark.parametrize("entry, expected", [
    ('{"job_id": "7", "directory": "relative"}', "not an absolute path"),
    ('{"job_id": "8", "directory": "/tmp"}', "names job '8', not 7"),
    ('[1]', "not a JSON object"),
    ('{"job_id": "7", "directory": "/nonexistent/x"}', "No such file"),
])
def test_registry_entries_are_hostile_input(tmp_path, entry, expected):
    (tmp_path / "7.json").write_text(entry)
    with pytest.raises(SnapshotError, match=expected):
        registry.lookup("7", str(tmp_path))


def test_registry_refuses_a_link_as_directory(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    (tmp_path / "7.json").write_text(json.dumps({"job_id": "7", "directory": str(tmp_path / "link")}))
    with pytest.raises(SnapshotError, match="not a directory"):
        registry.lookup("7", str(tmp_path))


def test_young_and_daly():
    assert interval.young(10, 3600) == pytest.approx(math.sqrt(2 * 10 * 3600))
    assert interval.daly(10, 3600, 600) == pytest.approx(math.sqrt(2 * 10 * 4200))
    assert interval.job_mtbf_s(100, 6300) == pytest.approx(6300 * 36)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(SnapshotError):
            interval.young(bad, 10)
    assert interval.clamp(1.0) == interval.MIN_INTERVAL_S


def test_mtbf_from_env(monkeypatch):
    monkeypatch.setenv(interval.ENV_MTBF_H, "2")
    assert interval.mtbf_from_env(4) == (7200.0, interval.ENV_MTBF_H)
    monkeypatch.setenv(interval.ENV_MTBF_H, "x")
    with pytest.raises(SnapshotError, match="is not a number"):
        interval.mtbf_from_env(4)
    monkeypatch.delenv(interval.ENV_MTBF_H)
    assert interval.mtbf_from_env(2)[0] == pytest.approx(interval.DEFAULT_NODE_MTBF_H * 1800)
