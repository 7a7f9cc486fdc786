"""`fleetctl audit --drain` when things go wrong while acting, in-process over the local transport:
the real payload runs once per node (its simulated GPUs and kernel log under tmp_path), the real
Slurm client commands are used where no controller is needed (a dead slurm.conf).

Two stand-ins sit first on PATH where a real component cannot run here:
- `scontrol`: a small Slurm controller's view (known nodes, their state) in a JSON file, which
  prints what scontrol prints (`Node X not found` on stdout, exit 1, for unknown names; see
  src/scontrol/info_node.c) and logs every call, so a test sees exactly what was changed;
- `python3` for one node: a node that answers with a hostile or broken result document.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from fleetctl.cli import run

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from fsfixtures import full_fs, readonly_fs  # noqa: E402,F401
from test_checks_payload import sim_gpus  # noqa: E402

SITE = """
[cluster]
name = "t"
[access]
transport = "local"
command_timeout = 30
[checks]
kernel_log = "{dir}/{{node}}/kern.log"
simulated_gpus = "{dir}/{{node}}/gpus.json"
state_file = "{dir}/{{node}}/state.json"
[slurm]
conf = "{conf}"
[[node_classes]]
name = "h100"
nodes = "n[1-3]"
memory_gb = 0.5
mounts = ["/"]
gpus = {{ count = 4, model = "NVIDIA H100 80GB HBM3", driver_version = "550.54.15" }}
nics = [{{ name = "lo", mtu = 65536 }}]
"""

FAKE_SCONTROL = """#!{python}
import json, os, sys
from ClusterShell.NodeSet import NodeSet
path = os.environ["FAKE_SLURM"]
state = json.load(open(path))
state["calls"].append(sys.argv[1:])
args = [a for a in sys.argv[1:] if a != "--oneliner"]
rc = 0
if args[:2] == ["show", "node"]:
    for name in NodeSet(args[2]):
        node = state["nodes"].get(name)
        if node is None:
            print("Node %s not found" % name)
            rc = 1
        else:
            print("NodeName=%s State=%s Partitions=p Reason=%s" % (name, node["state"], node["reason"])
                  if node["reason"] else "NodeName=%s State=%s Partitions=p" % (name, node["state"]))
elif args[:1] == ["update"]:
    fields = dict(a.split("=", 1) for a in args[1:])
    for name in NodeSet(fields["NodeName"]):
        if name not in state["nodes"]:
            print("slurm_update error: Invalid node name specified", file=sys.stderr)
            sys.exit(1)
        if fields["State"] == "DRAIN":
            state["nodes"][name].update(state="IDLE+DRAIN", reason=fields["Reason"] + " [root@now]")
json.dump(state, open(path, "w"))
sys.exit(rc)
"""

FAKE_PYTHON = """#!/bin/sh
if [ "$FLEETCTL_NODE" = "$HOSTILE_NODE" ]; then cat "$HOSTILE_DOC"; exit 0; fi
exec {python3} "$@"
"""


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """Three nodes' files, a site file, and the stand-ins on PATH. Slurm knows n1 and n2 only."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00", time.gmtime())
    for node in ("n1", "n2", "n3"):
        (tmp_path / node).mkdir()
        (tmp_path / node / "gpus.json").write_text(json.dumps(sim_gpus()))
        (tmp_path / node / "kern.log").write_text("")
    (tmp_path / "n2" / "kern.log").write_text(
        f"{now} NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _exe(bindir / "scontrol", FAKE_SCONTROL.format(python=sys.executable))
    python3 = next(p for p in (Path(d) / "python3" for d in os.environ["PATH"].split(":")) if p.exists())
    _exe(bindir / "python3", FAKE_PYTHON.format(python3=python3))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    slurm = tmp_path / "slurm.json"
    slurm.write_text(json.dumps({"calls": [], "nodes": {"n1": {"state": "IDLE", "reason": ""},
                                                        "n2": {"state": "IDLE", "reason": ""}}}))
    monkeypatch.setenv("FAKE_SLURM", str(slurm))
    monkeypatch.setenv("HOSTILE_NODE", "none")
    site = tmp_path / "site.toml"
    site.write_text(SITE.format(dir=tmp_path, conf=""))

    class Lab:
        dir = tmp_path

        def audit(self, capsys, *args):
            capsys.readouterr()
            rc = run(["--site", str(site), "--format", "json", "audit", "--level", "quick",
                      "--since", "1h", *args])
            out = capsys.readouterr()
            return rc, (json.loads(out.out) if out.out.strip() else None), out.err

        def slurm(self):
            return json.loads(slurm.read_text())

        def hostile(self, node, doc):
            (tmp_path / "hostile.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
            monkeypatch.setenv("HOSTILE_NODE", node)
            monkeypatch.setenv("HOSTILE_DOC", str(tmp_path / "hostile.json"))

        def dead_controller(self):
            conf = tmp_path / "slurm.conf"
            conf.write_text("ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\n"
                            "AuthType=auth/none\nCredType=cred/none\nMessageTimeout=2\n"
                            "NodeName=n[1-3] CPUs=1\nPartitionName=p Nodes=n[1-3] Default=YES\n")
            site.write_text(SITE.format(dir=tmp_path, conf=conf))
            monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])  # the real scontrol

    return Lab()


def by_node(report):
    return {n["node"]: n for n in report["nodes"]}


def test_node_unknown_to_slurm_does_not_stop_the_drain(lab, capsys):
    # Before: one `scontrol show node n[1-3]` failed on n3, the audit exited 3 and drained nothing.
    rc, report, err = lab.audit(capsys, "n[1-3]", "--drain")
    assert rc == 2, err
    assert report["actions"]["drained"] == ["n2"] and report["actions"]["unknown"] == ["n3"]
    assert report["actions"]["failed"] == {}
    assert lab.slurm()["nodes"]["n2"]["reason"].startswith("fleetctl:xid.79 ")
    shows = [c for c in lab.slurm()["calls"] if c[:2] == ["show", "node"]]
    assert shows[0] == ["show", "node", "n[1-3]", "--oneliner"]  # still one call for all nodes


def test_unknown_node_with_a_failure_is_reported_not_drained(lab, capsys):
    (lab.dir / "n3" / "kern.log").write_text((lab.dir / "n2" / "kern.log").read_text())
    rc, report, err = lab.audit(capsys, "n[1-3]", "--drain")
    assert rc == 2, err
    assert report["actions"]["drained"] == ["n2"]
    assert "Slurm does not know this node" in report["actions"]["skipped"]["n3"]


BAD_DOCS = [
    ("no code", {"results": [{"status": "fail", "message": "x", "action": "reboot"}]},
     "results[0].code is missing"),
    ("bad code", {"results": [{"code": "x y;", "status": "fail", "message": "m", "action": "reboot"}]},
     "results[0].code is missing or not a check code"),
    ("results not a list", {"results": {"code": "gpu.count"}}, "results is not a list"),
    ("status of a result", {"results": [{"code": "a", "status": 3, "message": "", "action": "none"}]},
     "results[0].status is not one of"),
    ("huge message", {"results": [{"code": "a", "status": "fail", "message": "x" * 100_000,
                                   "action": "drain"}]}, "results[0].message is longer than"),
    ("facts of the wrong type", {"facts": {"gpu": {"count": [4]}}}, "facts.gpu.count has the wrong type"),
    ("a status that hides a failure", {"status": "ok", "results": [
        {"code": "xid.79", "status": "fail", "message": "m", "action": "reboot"}]},
     "status says 'ok' but its worst result is 'fail'"),
]


@pytest.mark.parametrize("what,doc,message", BAD_DOCS, ids=[b[0] for b in BAD_DOCS])
def test_malformed_node_document_is_an_error_and_others_are_acted_on(lab, capsys, what, doc, message):
    # Before: KeyError/TypeError in the controller, a traceback, and no node drained.
    full = {"schema": "fleetctl.checks/1", "node": "n1", "level": "quick", "complete": True,
            "status": "fail", "action": "reboot", "results": [], "facts": {}}
    full.update(doc)
    if "status" not in doc:
        full["status"] = max((r.get("status") for r in full["results"] if isinstance(r, dict)
                              and isinstance(r.get("status"), str)), default="ok")
    lab.hostile("n1", full)
    rc, report, err = lab.audit(capsys, "n[1-2]", "--drain")
    assert report is not None, err
    nodes = by_node(report)
    assert nodes["n1"]["status"] == "error" and message in nodes["n1"]["error"], nodes["n1"]["error"]
    assert report["actions"]["drained"] == ["n2"]
    assert rc == 2


@pytest.mark.parametrize("text", ["[" * 100_000, "not json", json.dumps([1, 2]), "",
                                  json.dumps({"schema": "fleetctl.checks/1"})])
def test_garbage_from_a_node_is_an_error(lab, capsys, text):
    lab.hostile("n1", text)
    rc, report, err = lab.audit(capsys, "n[1-2]", "--drain")
    assert by_node(report)["n1"]["status"] == "error" and report["actions"]["drained"] == ["n2"], err


def test_unreachable_slurmctld_is_reported_with_the_audit(lab, capsys):
    # Before: a SlurmError after the checks, exit 3 and no report at all.
    lab.dead_controller()
    rc, report, err = lab.audit(capsys, "n[1-2]", "--drain")
    assert rc == 3
    assert by_node(report)["n2"]["status"] == "fail"
    assert report["actions"]["error"].startswith("slurmctld not reachable")
    assert report["errors"][0]["step"] == "slurm"


def test_outputs_are_checked_before_any_work_or_action(lab, capsys, readonly_fs):
    # Before: n2 was drained, then writing the Prometheus file failed (exit 3, no report).
    for option, path in (("--prom", readonly_fs / "a.prom"), ("--history", readonly_fs / "hist"),
                         ("--out", readonly_fs / "run.h5")):
        rc, report, err = lab.audit(capsys, "n[1-2]", "--drain", option, str(path))
        assert rc == 3 and "nodes" not in report  # refused before the checks ran
        message = report["error"]["message"]
        assert message.startswith(f"{option} {path}") and "Read-only file system" in message
    assert lab.slurm()["calls"] == [] and lab.slurm()["nodes"]["n2"]["reason"] == ""


def test_output_failure_after_actions_lists_the_actions(lab, capsys, full_fs):
    # A full disk: an empty file still fits (the check passes), the report does not. Before: n2
    # was drained, then "cannot write" was the only line printed (exit 3, the drain unreported).
    fd = os.open(full_fs / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"x" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    rc, report, err = lab.audit(capsys, "n[1-2]", "--drain", "--prom", str(full_fs / "a.prom"),
                                "--history", str(full_fs / "hist"))
    assert rc == 3, err
    assert report["actions"]["drained"] == ["n2"]
    assert [e["step"] for e in report["errors"]] == ["history", "prom"]
    assert all("No space left on device" in e["message"] for e in report["errors"])
    assert sorted(os.listdir(full_fs)) == ["filler", "hist"] and os.listdir(full_fs / "hist") == [".lock"]
