"""The payload end to end: built into one script, piped to `python3 -` in a real subprocess."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from fleetctl.checks import (build_payload, parse_payload_output, payload_args, run_payload_locally,
                             run_payload_subprocess, since_epoch)
from fleetctl.config.site import parse_site
from fleetctl.errors import ConfigError, DataError, UsageError

FIX = Path(__file__).parents[1] / "fixtures" / "checks"
BARE_PYTHON = ["python3", "-I", "-S"]  # no site-packages: the payload must live on the standard library

SITE = """
[cluster]
name = "t"
[checks]
kernel_log = "{dir}/{{node}}/kern.log"
simulated_gpus = "{dir}/{{node}}/gpus.json"
state_file = "{dir}/{{node}}/state.json"
xid_policy = {{ "63" = "fail:reset-gpu" }}
[thresholds]
prolog_budget_s = 4.0
[[node_classes]]
name = "h100"
nodes = "node[1-4]"
memory_gb = 0.5
mounts = ["/"]
gpus = {{ count = 4, model = "NVIDIA H100 80GB HBM3", driver_version = "550.54.15" }}
nics = [{{ name = "lo", mtu = 65536 }}]
"""


def sim_gpus(n=4, **fault):
    doc = json.loads((Path(__file__).parents[2] / "docs" / "simulated-gpus.md").read_text()
                     .split("```json", 1)[1].split("```", 1)[0])
    doc["gpus"] = [dict(doc["gpus"][0], index=i, pci_bus_id="00000000:%02X:00.0" % (0x18 + i))
                   for i in range(n)]
    doc["gpus"][0].update(fault)
    return doc


@pytest.fixture
def lab_dir(tmp_path):
    node = tmp_path / "node2"
    node.mkdir()
    (node / "gpus.json").write_text(json.dumps(sim_gpus()))
    (node / "kern.log").write_text("")
    return tmp_path


@pytest.fixture
def site(lab_dir):
    return parse_site(SITE.format(dir=lab_dir), source="site.toml")


def test_payload_modules_define_no_name_twice():
    """Concatenated into one script, a second definition would silently replace the first."""
    import ast
    from collections import Counter
    from fleetctl.checks.builder import PAYLOAD_MODULES
    pkg = Path(__file__).parents[2] / "fleetctl" / "checks" / "payload"
    names = Counter()
    for module in PAYLOAD_MODULES:
        for node in ast.parse((pkg / f"{module}.py").read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names[node.name] += 1
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert [n for n, c in names.items() if c > 1] == []
    ast.parse(build_payload(), feature_version=(3, 8))  # the nodes' python3 may be as old as 3.8


def test_built_payload_is_standard_library_only():
    src = build_payload()
    compile(src, "payload", "exec")
    assert "fleetctl" not in "".join(l for l in src.splitlines() if "import" in l)
    assert src.count("from __future__ import annotations") == 1


def test_payload_args_from_the_site(site, lab_dir):
    a = payload_args(site, "node2", "quick", since=123.0)
    assert a["kernel_log"] == f"{lab_dir}/node2/kern.log" and a["simulated_gpus"].endswith("node2/gpus.json")
    assert a["budget_s"] == 4.0 and a["since"] == 123.0 and a["gpus"]["count"] == 4
    assert a["xid_policy"] == {"63": {"status": "fail", "action": "reset-gpu"}}
    assert a["nics"][0]["name"] == "lo" and a["mounts"] == ["/"]
    assert payload_args(site, "node2", "standard")["budget_s"] == 59.0
    json.dumps(a)


def test_payload_args_bad_input(site, lab_dir):
    with pytest.raises(ConfigError, match="node 'gpu9' is in no node class"):
        payload_args(site, "gpu9")
    with pytest.raises(UsageError, match="unknown check level 'fast'"):
        payload_args(site, "node2", "fast")
    bad = parse_site(SITE.format(dir=lab_dir).replace('"fail:reset-gpu"', '"fatal:reset"'), source="s.toml")
    with pytest.raises(ConfigError, match="checks.xid_policy.*not status:action"):
        payload_args(bad, "node2")


def test_healthy_node_end_to_end(site):
    doc = run_payload_subprocess(payload_args(site, "node2", "quick", boot_id="b1"), python=BARE_PYTHON)
    bad = [r for r in doc["results"] if r["status"] not in ("ok", "skipped")]
    assert doc["status"] == "ok", bad
    assert doc["complete"] and doc["simulated"] and doc["node"] == "node2" and doc["schema"] == "fleetctl.checks/1"
    assert doc["facts"]["gpu"]["count"] == 4 and doc["facts"]["nics"]["lo"]["mtu"] == 65536
    assert doc["elapsed_s"] < doc["budget_s"]


def test_injected_xid_79_and_ecc_fault_end_to_end(site, lab_dir):
    (lab_dir / "node2/gpus.json").write_text(json.dumps(sim_gpus(ecc={"volatile_sbe": 0, "volatile_dbe": 3,
                                                                      "aggregate_sbe": 0, "aggregate_dbe": 3})))
    now = time.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00", time.gmtime())
    old = "2020-01-01T00:00:00,000000+00:00"
    (lab_dir / "node2/kern.log").write_text(
        f"{old} NVRM: Xid (PCI:0000:1b:00): 48, pid=1, name=x, An uncorrectable double bit error\n"
        + f"{now} NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus.\n" * 50)
    doc = run_payload_subprocess(payload_args(site, "node2", "quick", since=time.time() - 60, boot_id="b1"),
                                 python=BARE_PYTHON)
    r = {x["code"]: x for x in doc["results"]}
    assert doc["status"] == "fail" and doc["action"] == "reboot"
    assert r["xid.79"]["evidence"]["count"] == 50 and r["xid.79"]["simulated"]
    assert r["xid.79"]["evidence"]["gpu"] == "gpu0"  # 0000:18:00 is the GPU NVML calls 00000000:18:00.0
    assert "xid.48" not in r  # before the since-time
    assert r["gpu.ecc"]["status"] == "fail" and r["gpu.ecc"]["subject"] == "gpu0"
    state = json.loads((lab_dir / "node2/state.json").read_text())
    assert state["nodes"]["node2"]["xid_boots"] == {"0000:18:00/79": ["b1"]}


def test_shared_state_file_keeps_nodes_apart(site, lab_dir):
    """A state path without {node} on a shared filesystem: each node keeps its own entry."""
    (lab_dir / "node3").mkdir()
    (lab_dir / "node3/gpus.json").write_text(json.dumps(sim_gpus()))
    (lab_dir / "node3/kern.log").write_text("")
    shared = str(lab_dir / "shared-state.json")
    for node in ("node2", "node3"):
        run_payload_subprocess(dict(payload_args(site, node, "quick", boot_id="b1"), state_file=shared),
                               python=BARE_PYTHON)
    nodes = json.loads(Path(shared).read_text())["nodes"]
    assert set(nodes) == {"node2", "node3"} and "counters" in nodes["node3"]


def test_local_run_gives_the_same_document(site):
    doc = run_payload_locally(payload_args(site, "node2", "quick", boot_id="b1"))
    assert doc["status"] == "ok" and {r["code"] for r in doc["results"]} >= {"gpu.count", "xid.scan",
                                                                           "host.cpus", "nic.link"}
    with pytest.raises(UsageError, match="unknown level"):
        run_payload_locally({"level": "ultra"})


def test_standard_level_samples_counters_and_checks_the_clock(site):
    doc = run_payload_subprocess(payload_args(site, "node2", "standard", counter_interval_s=0.2),
                                 python=BARE_PYTHON)
    codes = {(r["code"], r["status"]) for r in doc["results"]}
    assert ("nic.counters", "ok") in codes and any(c == "host.clock" for c, _ in codes)


def test_hung_check_is_reported_as_budget_exceeded(site, lab_dir):
    """A kernel log that never answers (a FIFO with no writer, like a hung NFS read) must not hold the
    payload past its budget: the other checks report, the stuck one is an error."""
    fifo = lab_dir / "node2/kern.log"
    fifo.unlink()
    os.mkfifo(fifo)
    args = payload_args(site, "node2", "quick", budget_s=1.5)
    t0 = time.monotonic()
    doc = run_payload_subprocess(args, python=BARE_PYTHON)
    wall = time.monotonic() - t0
    assert wall < 3.0
    r = {x["code"]: x for x in doc["results"]}
    assert r["xid.budget"]["status"] == "error" and "budget exceeded" in r["xid.budget"]["message"]
    assert not doc["complete"] and r["host.cpus"]["status"] == "ok" and r["gpu.count"]["status"] == "ok"


def test_payload_killed_by_timeout_is_a_data_error(site, lab_dir):
    fifo = lab_dir / "node2/kern.log"
    fifo.unlink()
    os.mkfifo(fifo)
    args = payload_args(site, "node2", "quick", budget_s=30)
    with pytest.raises(DataError, match="killed after 1 s"):
        run_payload_subprocess(args, python=BARE_PYTHON, timeout=1)


def test_bad_arguments_get_one_line_errors():
    proc = subprocess.run(BARE_PYTHON + ["-", "{not json"], input=build_payload().encode(),
                          capture_output=True)
    assert proc.returncode == 3 and proc.stderr == b""
    with pytest.raises(DataError, match="bad payload arguments"):
        parse_payload_output(proc.stdout.decode(), proc.returncode)
    with pytest.raises(DataError, match="bad payload arguments: unknown level"):
        run_payload_subprocess({"level": "ultra"}, python=BARE_PYTHON)
    with pytest.raises(DataError, match=r"exit 1.*Traceback|exit 1"):
        parse_payload_output("", 1, "Traceback (most recent call last): ...")


def test_since_forms():
    assert since_epoch(None) is None and since_epoch(12.5) == 12.5
    assert abs(since_epoch("2h") - (time.time() - 7200)) < 2
    assert since_epoch("2026-11-29T15:50:01+00:00") == 1795967401.0
    with pytest.raises(UsageError, match="--since 'yesterday'"):
        since_epoch("yesterday")


def test_payload_args_for_the_lab_example_site():
    """The site file `fleetctl lab up` writes must give usable payload arguments."""
    from fleetctl.config.site import load_site
    site = load_site(Path(__file__).parents[2] / "site_configs" / "lab-example.toml")
    node = sorted(site.nodes)[0]
    a = payload_args(site, node, "quick")
    assert a["node"] == node and [n["name"] for n in a["nics"]] == [n.name for n in site.node_class(node).nics]
    json.dumps(a)


def test_every_name_the_payload_reads_is_defined_in_it():
    """The builder drops the cross-module imports: a name used but defined nowhere in the script would
    only fail on a node, in whatever rare branch uses it. (Coarse: any binding anywhere counts.)"""
    import ast
    import builtins
    tree = ast.parse(build_payload())
    bound = set(dir(builtins)) | {"__name__", "__file__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert sorted(used - bound) == []


def test_an_xid_flood_still_fails_the_prolog_inside_its_budget(site, lab_dir):
    """Issue 14: a million Xid 79 lines used to run the quick level out of its budget (`xid.budget`,
    an error the Prolog lets pass). The shipped script must now report the Xid, within the budget."""
    line = "2026-11-29T15:50:01,%06d+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python3, " \
           "GPU has fallen off the bus.\n"
    with open(lab_dir / "node2/kern.log", "w") as f:
        f.writelines(line % (i % 1000000) for i in range(1_000_000))
    args = payload_args(site, "node2", "quick", budget_s=4.0)
    t0 = time.monotonic()
    doc = run_payload_subprocess(args, python=BARE_PYTHON)
    assert time.monotonic() - t0 < 6.0
    r = {x["code"]: x for x in doc["results"]}
    assert "xid.budget" not in r
    assert r["xid.79"]["status"] == "fail" and doc["status"] == "fail" and doc["action"] in ("reboot", "inspect-hardware")
    assert len(json.dumps(doc)) < 100_000
