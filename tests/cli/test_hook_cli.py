"""`fleetctl hook prolog|epilog|healthcheck|install` in-process: the real checks on simulated GPUs and
a kernel log under tmp_path, Slurm through a stand-in `scontrol` (test_audit_faults.FAKE_SCONTROL)
that logs every call, so a test sees exactly what was drained or resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.cli import run

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from simsite import sim_site  # noqa: E402  (tests/cli)
from test_audit_faults import FAKE_SCONTROL, _exe  # noqa: E402  (tests/cli)
from test_hook_wrapper import FAKE  # noqa: E402

XID79 = "{now} NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """n1 healthy, n2 with an Xid 79 in its kernel log; Slurm knows both, idle."""
    site = sim_site(tmp_path, ["n1", "n2"], transport=None)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _exe(bindir / "scontrol", FAKE_SCONTROL.format(python=sys.executable))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    slurm = tmp_path / "slurm.json"
    slurm.write_text(json.dumps({"calls": [], "nodes": {"n1": {"state": "IDLE", "reason": ""},
                                                        "n2": {"state": "IDLE", "reason": ""}}}))
    monkeypatch.setenv("FAKE_SLURM", str(slurm))
    monkeypatch.setenv("FLEETCTL_HOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FLEETCTL_HOOK_LOG", str(tmp_path / "hooks.log"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("FLEETCTL_SITE", str(site))

    class Node:
        dir = tmp_path

        def hook(self, capsys, name: str, hook: str, *args) -> tuple[int, dict, str]:
            monkeypatch.setenv("SLURMD_NODENAME", name)
            capsys.readouterr()
            rc = run(["hook", hook, "--format", "json", *args])
            out = capsys.readouterr()
            return rc, json.loads(out.out), out.err

        def xid(self, name: str) -> None:
            now = time.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00", time.gmtime())
            (tmp_path / name / "kern.log").write_text(XID79.format(now=now))

        def slurm(self) -> dict:
            return json.loads(slurm.read_text())

        def set_slurm(self, name: str, state: str, reason: str) -> None:
            data = self.slurm()
            data["nodes"][name] = {"state": state, "reason": reason}
            slurm.write_text(json.dumps(data))

    return Node()


def updates(node) -> list[list[str]]:
    return [c for c in node.slurm()["calls"] if c[:1] == ["update"]]


def test_prolog_passes_a_healthy_node_and_keeps_its_verdict(node, capsys):
    rc, verdict, _ = node.hook(capsys, "n1", "prolog")
    assert rc == 0 and verdict["hook"] == "prolog" and verdict["node"] == "n1"
    assert not verdict["failed"] and not verdict["drained"] and updates(node) == []
    assert verdict["check"]["status"] == "ok"
    kept = json.loads((node.dir / "state" / "last-prolog-n1.json").read_text())
    assert kept["exit_code"] == 0 and kept["node"] == "n1"
    assert "fleetctl prolog node=n1 job=- verdict=pass drained=0" in (node.dir / "hooks.log").read_text()


def test_prolog_drains_on_a_definite_failure_and_exits_2(node, capsys):
    node.xid("n2")
    rc, verdict, _ = node.hook(capsys, "n2", "prolog")
    assert rc == 2 and verdict["failed"] and verdict["drained"]
    assert verdict["summary"].startswith("xid.79:")
    assert node.slurm()["nodes"]["n2"]["reason"].startswith("fleetctl:xid.79 ")
    assert "verdict=fail drained=1" in (node.dir / "hooks.log").read_text()


def test_epilog_drains_but_exits_0(node, capsys):
    node.xid("n2")
    rc, verdict, _ = node.hook(capsys, "n2", "epilog")
    assert rc == 0 and verdict["exit_code"] == 0 and verdict["failed"] and verdict["drained"]
    assert node.slurm()["nodes"]["n2"]["reason"].endswith("(epilog) [root@now]")  # the reason sanitiser keeps its brackets for Slurm


def test_epilog_judges_only_what_happened_since_the_prolog(node, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert node.hook(capsys, "n1", "prolog")[0] == 0
    assert (node.dir / "state" / "job-n1-42.json").exists()
    rc, verdict, _ = node.hook(capsys, "n1", "epilog")
    assert rc == 0 and not verdict["failed"] and updates(node) == []
    assert not (node.dir / "state" / "job-n1-42.json").exists()  # the job's mark is consumed


def test_healthcheck_resumes_a_node_fleetctl_drained_once_it_passes(node, capsys):
    node.set_slurm("n1", "IDLE+DRAIN", "fleetctl:xid.79 gone now [root@then]")
    rc, verdict, _ = node.hook(capsys, "n1", "healthcheck")
    assert rc == 0 and verdict["resumed"] and not verdict["failed"]
    assert ["update", "NodeName=n1", "State=RESUME"] in updates(node)


def test_healthcheck_leaves_a_node_somebody_else_drained(node, capsys):
    node.set_slurm("n1", "IDLE+DRAIN", "bad fan [admin@then]")
    rc, verdict, _ = node.hook(capsys, "n1", "healthcheck")
    assert rc == 0 and not verdict["resumed"] and updates(node) == []


def test_a_hook_that_cannot_run_logs_an_error_line(node, capsys, monkeypatch):
    monkeypatch.setenv("FLEETCTL_SITE", str(node.dir / "missing.toml"))
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    assert run(["hook", "prolog"]) == 3
    err = capsys.readouterr().err
    assert "fleetctl prolog node=n1 job=- verdict=error" in err and "Traceback" not in err


# ---------------------------------------------------------------- the installer
def _site(tmp_path: Path, dirname: str) -> Path:
    d = tmp_path / dirname
    d.mkdir()
    path = d / "site.toml"
    path.write_text('[cluster]\nname = "t"\n[[node_classes]]\nname = "c"\nnodes = "n[1-2]"\n')
    return path


def test_install_writes_settings_the_wrapper_reads_back_exactly(tmp_path):
    site = _site(tmp_path, "a b;touch pwned;$(id)")
    target = tmp_path / "hooks"
    assert run(["--site", str(site), "hook", "install", str(target), "--log", str(tmp_path / "h.log")]) == 0
    text = (target / "fleetctl-hooks.env").read_text()
    assert f"FLEETCTL_SITE='{site}'" in text
    # Even a shell that sources it (an old wrapper) gets the literal path and runs nothing.
    shown = subprocess.run(["/bin/sh", "-c", '. "$1"; printf %s "$FLEETCTL_SITE"', "sh",
                            str(target / "fleetctl-hooks.env")], capture_output=True, text=True, cwd=tmp_path)
    assert shown.stdout == str(site) and not (tmp_path / "pwned").exists()
    fake = tmp_path / "fake-fleetctl"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    with open(target / "fleetctl-hooks.env", "a") as fh:
        fh.write(f"FLEETCTL={fake}\n")
    seen = tmp_path / "seen.json"
    out = subprocess.run(["/bin/sh", str(target / "fleetctl-prolog")], capture_output=True, text=True,
                         cwd=tmp_path, env={"PATH": os.environ["PATH"], "FAKE_OUT": str(seen)})
    assert out.returncode == 0, out.stderr
    assert json.loads(seen.read_text())["env"]["FLEETCTL_SITE"] == str(site)
    assert not (tmp_path / "pwned").exists()


def test_install_json_names_the_files(tmp_path, capsys):
    site = _site(tmp_path, "s")
    target = tmp_path / "hooks"
    assert run(["--site", str(site), "--format", "json", "hook", "install", str(target)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"installed": [str(target / f"fleetctl-{h}") for h in ("prolog", "epilog", "healthcheck")],
                    "env": str(target / "fleetctl-hooks.env"), "site": str(site.resolve())}
    assert all(os.access(p, os.X_OK) for p in data["installed"])


@pytest.mark.parametrize("dirname", ["it's", 'q"uote', "back\\slash", "new\nline"])
def test_install_refuses_values_it_cannot_write_safely(tmp_path, capsys, dirname):
    site = _site(tmp_path, dirname)
    target = tmp_path / "hooks"
    assert run(["--site", str(site), "hook", "install", str(target)]) == 3
    assert "cannot install hooks: FLEETCTL_SITE" in capsys.readouterr().err
    assert not target.exists()  # nothing half-installed
