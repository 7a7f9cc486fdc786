"""Snapshot files as hostile input (issue 20): deeply nested JSON, registry squatting, symlinked
directories, retention with a corrupt newest snapshot, the CLI's errors. No torch needed; the
restore-side defects (a planted pickle, a snapshot that fails to load) are in test_snapshot_torch.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fleetctl.cli import run
from fleetctl.snapshot import SnapshotError, catalog, layout, manifest, registry

sys.path.insert(0, os.path.dirname(__file__))
from snapfixtures import flip_byte, make_snapshot  # noqa: E402

DEEP = "[" * 60_000


@pytest.fixture
def reg(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_LAB_DIR", str(tmp_path / "nolab"))
    monkeypatch.delenv("FLEETCTL_SITE", raising=False)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    path = tmp_path / "registry"
    path.mkdir(mode=0o1777)
    monkeypatch.setenv(registry.ENV_REGISTRY, str(path))
    return path


# ---------------------------------------------------------------- defect 1: nested JSON
def test_deeply_nested_registry_entry_is_a_snapshot_error(reg):
    (reg / "7.json").write_text(DEEP)
    with pytest.raises(SnapshotError, match="nested deeper"):
        registry.lookup("7", str(reg))
    assert registry.entries(str(reg))[0]["problem"].endswith("nested deeper than 64 levels")


@pytest.mark.parametrize("name", [manifest.MANIFEST, layout.STATUS])
def test_deeply_nested_manifest_and_status_are_errors_not_tracebacks(tmp_path, reg, capsys, name):
    root = tmp_path / "snaps"
    path = make_snapshot(root, 3)
    target = path / name if name == manifest.MANIFEST else root / name
    target.write_text(DEEP)
    commands = [["snapshot", "list", str(root)], ["snapshot", "interval", str(root)]]
    if name == manifest.MANIFEST:
        commands.append(["snapshot", "verify", str(root)])
        assert not manifest.verify(path).ok and "nested deeper" in manifest.verify(path).reason
    for argv in commands:
        code = run(argv)
        err = capsys.readouterr().err
        assert code in (0, 2, 3) and "Traceback" not in err and "RecursionError" not in err, (argv, err)


def test_a_deep_request_still_asks_for_a_snapshot(tmp_path):
    (tmp_path / layout.REQUEST).write_text(DEEP)
    assert layout.take_request(tmp_path) == {"id": None, "reason": "request"}


# ---------------------------------------------------------------- defect 6: registry squatting
def _squat(reg: Path, job: str, directory: Path, uid: int = 54321) -> Path:
    directory.mkdir(exist_ok=True)
    os.chown(directory, uid, uid)
    path = reg / f"{job}.json"
    path.write_text(json.dumps({"job_id": job, "directory": str(directory), "world_size": 1}))
    os.chown(path, uid, uid)
    return path


def test_a_squatted_entry_neither_blocks_nor_redirects_the_job(tmp_path, reg):
    squatted = _squat(reg, "4242", tmp_path / "attacker")
    mine = tmp_path / "mine"
    mine.mkdir()
    written = registry.register("4242", mine, 2, str(reg))
    assert written != squatted and written.name.startswith("4242.") and squatted.exists()
    assert registry.lookup("4242", str(reg), owner=os.geteuid()) == mine
    with pytest.raises(SnapshotError, match="cannot tell which is the job's"):
        registry.lookup("4242", str(reg))  # owner unknown: never a guess between two owners
    assert registry.register("4242", mine, 2, str(reg)) == written  # a requeue refreshes its own entry


def test_an_entry_of_another_user_is_not_the_jobs(tmp_path, reg):
    _squat(reg, "77", tmp_path / "attacker")
    with pytest.raises(SnapshotError, match="no registry entry .* written by uid"):
        registry.lookup("77", str(reg), owner=4000)


def test_root_resolves_a_job_through_its_owner_in_slurm(tmp_path, reg, monkeypatch, capsys):
    """`snapshot list JOBID` as root: the owner comes from Slurm; without Slurm two owners are refused."""
    _squat(reg, "88", tmp_path / "attacker")
    mine = tmp_path / "mine"
    mine.mkdir()
    make_snapshot(mine, 1)
    registry.register("88", mine, 2, str(reg))
    assert run(["snapshot", "list", "88", "--format", "json"]) == 3
    assert "cannot tell which is the job's" in capsys.readouterr().err
    import fleetctl.cli.snapshot.common as cli_snapshot

    monkeypatch.setattr(cli_snapshot, "slurm_owner", lambda app, job: os.geteuid())
    assert run(["snapshot", "list", "88", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["directory"] == str(mine)


def test_a_missing_registry_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(registry.ENV_REGISTRY, str(tmp_path / "typo"))
    assert run(["snapshot", "list"]) == 3
    assert "no such snapshot registry" in capsys.readouterr().err


# ---------------------------------------------------------------- defect 22: symlinked directories
@pytest.mark.parametrize("command", [["prune", "--keep", "1"], ["take"]])
def test_a_symlinked_snapshot_directory_is_never_followed(tmp_path, reg, capsys, command):
    victim = tmp_path / "victim"
    for step in (1, 2, 3):
        make_snapshot(victim, step)
    link = tmp_path / "link"
    link.symlink_to(victim)
    assert run(["snapshot", command[0], str(link), *command[1:]]) == 3
    assert "symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in victim.iterdir()) == ["LATEST", "step_1", "step_2", "step_3"]


# ---------------------------------------------------------------- defect 25: retention
def test_prune_never_removes_the_newest_snapshot_that_verifies(tmp_path, reg, capsys):
    root = tmp_path / "snaps"
    for step in (1, 2, 3):
        make_snapshot(root, step)
    flip_byte(root / "step_3" / "__0_0.distcp")  # LATEST is corrupt
    assert run(["snapshot", "prune", str(root), "--keep", "1", "--format", "json"]) == 0
    removed = json.loads(capsys.readouterr().out)["removed"]
    assert removed == [str(root / "step_1")]
    assert catalog.choose(root).step == 2


def test_prune_plan_keeps_latest_newest_and_the_newest_good(tmp_path):
    for step in (1, 2, 3, 4, 5):
        make_snapshot(tmp_path, step, latest=False)
    layout.write_latest(tmp_path, 1)
    for step in (4, 5):
        flip_byte(tmp_path / f"step_{step}" / "__1_0.distcp")
    planned = sorted(e.step for e in catalog.prune_plan(tmp_path, 1))
    assert planned == [2, 4]  # kept: 5 (newest), 3 (newest that verifies), 1 (LATEST)
