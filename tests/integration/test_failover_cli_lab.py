"""`fleetctl failover drill` and `watch` on the lab: the drill between the first and the last host
over both NICs with the lab's faults (a NIC down, then flapping), the same drill as on a real
cluster (srun inside a Slurm maintenance reservation, `ip link` through srun) after its refusals, and
the watch inside a host's namespace while the lab takes that host's NIC down and up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.cli import run
from fleetctl.lab import faults
from fleetctl.slurm import backend_for_site

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "nccl_plugin" / "tests"))
import fleetnet  # noqa: E402

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def built():
    fleetnet.build()


def drill_json(capsys, *args) -> tuple[int, dict]:
    capsys.readouterr()
    rc = run(["--format", "json", "failover", "drill", *args])
    return rc, json.loads(capsys.readouterr().out)


def check_report(data: dict, kinds: list[str]) -> None:
    assert data["ok"] and data["problems"] == [], data
    assert [t["fault"] for t in data["trials"]] == kinds
    i = data["integrity"]
    assert i["bytes_checked"] > 0 and (i["corrupt"], i["duplicated"], i["lost"]) == (0, 0, 0)
    for t in data["trials"]:
        assert t["detection_ms"] is not None and 0 <= t["detection_ms"] < 2000, t
        assert t["failback_ms"] is not None and t["failback_ms"] < 15_000, t
        assert t["gbps_before"] > 0 and t["gbps_during"] > 0 and t["gbps_after"] > 0, t


def test_drill_in_the_lab_down_and_flap(lab, built, capsys):
    a, b = lab.nodes[0], lab.nodes[-1]
    rc, data = drill_json(capsys, a, b, "--fault", "both", "--hold", "1", "--flap-for", "2.5")
    assert rc == 0, json.dumps({k: data[k] for k in ("problems", "trials", "integrity", "sender", "receiver", "events")})
    check_report(data, ["down", "flap"])
    assert [t["nic"] for t in data["trials"]] == ["eth0", "eth1"]
    assert faults.listing() == []  # every fault cleared


def test_drill_on_a_real_cluster_needs_i_know_and_a_maintenance_reservation(lab, built, capsys, tmp_path):
    a, b = lab.nodes[0], lab.nodes[-1]
    # the same cluster without the [lab] section: fleetctl sees a real one
    text = re.sub(r"(?ms)^\[lab\]\n.*?(?=^\[|\Z)", "", lab.site_file.read_text())
    site = tmp_path / "real.toml"
    site.write_text(text)
    rc, data = drill_json(capsys, a, b, "--site", str(site))
    assert rc == 3 and "without --i-know" in data["error"]["message"]
    rc, data = drill_json(capsys, a, b, "--site", str(site), "--i-know", "--workdir", str(tmp_path))
    assert rc == 3 and "no active maintenance reservation" in data["error"]["message"]
    slurm = backend_for_site(lab.cluster)
    name = "fleetctl-drill-test"
    slurm.create_reservation(name, [a, b], flags=["maint", "ignore_jobs"], users=["root"])
    try:
        rc, data = drill_json(capsys, a, b, "--site", str(site), "--i-know", "--workdir", str(tmp_path),
                              "--hold", "1")
    finally:
        slurm.delete_reservation(name)
        for node in (a, b):  # whatever happened, the NICs are up again
            for nic in ("eth0", "eth1"):
                lab.run_in(node, ["ip", "link", "set", "dev", nic, "up"], check=False)
    assert rc == 0, json.dumps({k: data[k] for k in ("problems", "trials", "integrity", "sender", "receiver", "events")})
    check_report(data, ["down"])


def test_watch_in_a_host_sees_the_lab_taking_its_nic_down(lab, capsys):
    node = lab.nodes[1]
    proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{lab.netns(node)}", sys.executable, "-m", "fleetctl",
                             "--format", "json", "failover", "watch", "--nic", "eth1", "--interval", "0.2",
                             "--duration", "4", "--counters-dir", "/nonexistent"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=lab.command_env())
    first = proc.stdout.readline()
    assert first, proc.stderr.read()[-2000:]
    try:
        faults.add(f"{node}:eth1", "down")
        time.sleep(0.5)
    finally:
        faults.clear(f"{node}:eth1")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-2000:]
    events = [json.loads(line) for line in [first, *stdout.splitlines()]]
    assert [(e["event"], e["up"]) for e in events] == [("link_state", True), ("link_down", False), ("link_up", True)]
    assert events[-1]["downs"] == 1
