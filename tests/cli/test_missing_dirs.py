"""A state directory or registry named on the command line that is not there is a usage error (exit
3) naming it: a typo must not read as "no events" or "no job in the snapshot registry" with exit 0."""

from __future__ import annotations

import pytest

from fleetctl.cli import run


@pytest.mark.parametrize("argv, option", [
    (["lens", "events"], "--state-dir"),
    (["lens", "status"], "--state-dir"),
    (["lens", "stop"], "--state-dir"),
    (["lens", "records"], "--state-dir"),
    (["act", "log"], "--state-dir"),
    (["act", "undo", "a1"], "--state-dir"),
    (["explain", "node1"], "--state-dir"),
    (["spares", "status"], "--state-dir"),
    (["snapshot", "list"], "--registry"),
    (["snapshot", "verify", "123"], "--registry"),
])
def test_a_missing_directory_is_a_usage_error(argv, option, tmp_path, capsys):
    missing = tmp_path / "typo"
    assert run([*argv, option, str(missing)]) == 3
    err = capsys.readouterr().err
    assert option in err and str(missing) in err and "does not exist" in err


def test_an_existing_empty_directory_is_an_empty_state(tmp_path, capsys):
    assert run(["lens", "events", "--state-dir", str(tmp_path)]) == 0
    assert "no events" in capsys.readouterr().out
