"""The drill's lab adapters (fleetctl.lab.drill) refuse before anything exists: a site file naming
another machine's lab, no lab up. No lab is touched: FLEETCTL_LAB_DIR points at a temporary one."""

from __future__ import annotations

import json

import pytest

from fleetctl.errors import LabError, UsageError
from fleetctl.lab.drill import LabRunner, lab_adapters


def never():
    raise AssertionError("no workdir before the lab is known to be up")


def test_another_labs_site_file_and_no_lab_up_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_LAB_DIR", str(tmp_path / "here"))
    with pytest.raises(LabError, match="is not this machine's lab"):
        lab_adapters(str(tmp_path / "elsewhere"), never)
    with pytest.raises(LabError, match="no lab is up"):
        lab_adapters(str(tmp_path / "here"), never)
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "state.json").write_text(json.dumps({"status": "building"}))
    with pytest.raises(LabError, match="no lab is up"):
        lab_adapters(str(tmp_path / "here"), never)


def test_the_runner_knows_only_the_labs_hosts(tmp_path):
    runner = LabRunner({"node1": "fl-node1"}, tmp_path)
    assert runner.shared_clock and runner.workdir == tmp_path
    with pytest.raises(UsageError, match="node9: not a host of the lab"):
        runner.popen("node9", ["true"], {})
