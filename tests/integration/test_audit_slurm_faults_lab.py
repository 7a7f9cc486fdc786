"""`fleetctl audit --drain` against the lab's real Slurm when the site file and Slurm disagree, or
slurmctld cannot be reached: the audit is reported, every action accounted for."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from fleetctl.cli import run as cli_run
from fleetctl.slurm.parse import parse_record

pytestmark = pytest.mark.lab


def fleetctl_json(capsys, *args):
    capsys.readouterr()
    rc = cli_run(["--format", "json", *args])
    return rc, json.loads(capsys.readouterr().out)


@pytest.fixture
def clean(lab):
    yield
    cli_run(["lab", "fault", "clear"])
    subprocess.run(["scontrol", "update", f"NodeName={','.join(lab.nodes)}", "State=RESUME"],
                   env=lab.command_env(), capture_output=True, timeout=30)


def reason(lab, node) -> str:
    out = subprocess.run(["scontrol", "show", "node", node, "--oneliner"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return parse_record(out).get("Reason", "")


def test_node_unknown_to_slurm_does_not_stop_the_drain(lab, capsys, clean, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(lab.site_file.read_text() + '\n[[node_classes]]\nname = "ghosts"\nnodes = "ghost1"\n')
    start = time.time()
    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--xid", "79"]) == 0
    rc, report = fleetctl_json(capsys, "--site", str(site), "audit", "node2,ghost1", "--level", "quick",
                               "--since", str(start - 1), "--drain")
    assert rc == 2, report
    assert report["actions"]["drained"] == ["node2"] and report["actions"]["unknown"] == ["ghost1"]
    assert reason(lab, "node2").startswith("fleetctl:xid.79 ")


def test_unreachable_slurmctld_is_reported_and_nothing_half_done(lab, capsys, clean, tmp_path):
    conf = tmp_path / "slurm.conf"
    text = re.sub(r"(?m)^(SlurmctldPort|MessageTimeout)=.*$", "", (lab.lab_dir / "slurm.conf").read_text())
    conf.write_text(text + "\nSlurmctldPort=9\nMessageTimeout=2\n")  # nothing listens on port 9
    site = tmp_path / "site.toml"
    site.write_text(re.sub(r'(?m)^conf = ".*"$', f'conf = "{conf}"', lab.site_file.read_text()))
    start = time.time()
    assert cli_run(["lab", "fault", "add", "node2:gpu3", "--xid", "79"]) == 0
    rc, report = fleetctl_json(capsys, "--site", str(site), "audit", "node2", "--level", "quick",
                               "--since", str(start - 1), "--drain")
    assert rc == 3
    assert report["nodes"][0]["status"] == "fail"
    assert report["actions"]["error"].startswith("slurmctld not reachable")
    assert reason(lab, "node2") == ""  # nothing was drained behind the report's back
