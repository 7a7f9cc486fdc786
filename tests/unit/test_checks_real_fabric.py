"""NVLink fabric, IMEX, NVLink error counters and the fabric manager, judged on real outputs of other
people's machines (tests/data/real/, PROVENANCE.md). None of this hardware runs here: these samples
and NVML's documentation are what the code is checked against."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetctl.checks.payload import fabric as fb
from fleetctl.checks.payload.common import Deadline
from fleetctl.checks.payload.gpu_judge import judge_gpus
from fleetctl.checks.payload.xid import line_time

REAL = Path(__file__).parents[1] / "data" / "real"

# sample -> (fabric records an expert reads, gpu.fabric status, action, message part, NVLink domain)
SMI_FABRIC = {
    # Azure GB200 VM image: registered, but the fabric had no resources for it: the GPU cannot use NVLink
    "smi-q-fabric-azure-insufficient-resources.txt": (
        [{"state": "Completed", "status": "Insufficient Resources", "clique_id": 0,
          "cluster_uuid": fb.ZERO_UUID, "health": None, "bandwidth": None}],
        "fail", "drain", "fabric Completed with status Insufficient Resources", None),
    # GB200 tray in clique 2: registered, bandwidth full, but the health summary says Unhealthy
    "smi-q-fabric-gb200-completed-unhealthy.txt": (
        [{"state": "Completed", "status": "Success", "clique_id": 2,
          "cluster_uuid": "dc6e40c4-d722-4357-9ba6-5291dd461278", "health": "Unhealthy", "bandwidth": "Full"}],
        "warn", "inspect-hardware", "fabric health Unhealthy (bandwidth Full)",
        "dc6e40c4-d722-4357-9ba6-5291dd461278/2"),
    # HGX with driver 550, `grep -A 2`: only state and status; a single-node NVSwitch fabric, healthy
    "smi-q-fabric-hgx-550-completed-short.txt": (
        [{"state": "Completed", "status": "Success", "clique_id": None, "cluster_uuid": None,
          "health": None, "bandwidth": None}], "ok", "none", "fabric Completed (single-node fabric)", None),
    # driver 580 while the GPU registers: everything else N/A; transient, not a hardware fault
    "smi-q-fabric-inprogress-580.txt": (
        [{"state": "In Progress", "status": None, "clique_id": None, "cluster_uuid": None, "health": None,
          "bandwidth": None}], "warn", "none", "fabric registration in progress", None),
}


@pytest.mark.parametrize("name", sorted(SMI_FABRIC))
def test_nvidia_smi_fabric_samples(name):
    records, status, action, text, domain = SMI_FABRIC[name]
    parsed = fb.parse_smi_fabric_text((REAL / name).read_text())
    assert parsed == records
    gpus = [{"index": i, "fabric": f} for i, f in enumerate(parsed)]
    r = fb.judge_fabric(gpus, lambda g: "gpu%s" % g["index"])
    assert (r["status"], r["action"]) == (status, action) and text in r["message"], r
    assert fb.domain_of(gpus) == domain


def test_fabric_is_judged_only_where_there_is_one():
    judge = lambda gpus: [r for r in judge_gpus({"gpus": gpus}, {}, {}) if r["code"] == "gpu.fabric"]  # noqa
    assert judge([{"index": 0}]) == []  # the source reports no fabric (the lab, old drivers)
    not_supported = fb.fabric_record("Not Supported", "N/A", "N/A", "N/A")
    assert judge([{"index": 0, "fabric": not_supported}]) == []  # a PCIe card: no result at all
    gb200 = fb.parse_smi_fabric_text((REAL / "smi-q-fabric-gb200-completed-unhealthy.txt").read_text())[0]
    other = dict(gb200, clique_id=3, health=None)
    [r] = judge([{"index": 0, "fabric": dict(gb200, health=None)}, {"index": 1, "fabric": other}])
    assert r["status"] == "fail" and "in 2 NVLink domains" in r["message"]


# sample -> (daemon status, nodes, pairs in the matrix, domain state, verdict)
IMEX = {
    "imex-ctl-gb200-aws-18node-up.txt": (None, 18, 18 * 18, "UP", "ok"),
    "imex-ctl-gh200-2node-up.txt": ("READY", 2, 4, "UP", "ok"),
    "imex-ctl-gh200-1node-up.txt": ("READY", 1, 1, "UP", "ok"),
}


@pytest.mark.parametrize("name", sorted(IMEX))
def test_imex_ctl_samples(name):
    daemon, nodes, pairs, domain, verdict = IMEX[name]
    doc = fb.parse_imex_ctl((REAL / name).read_text())
    assert (doc["daemon"], len(doc["nodes"]), sum(len(r) for r in doc["matrix"].values()), doc["domain"]) == \
        (daemon, nodes, pairs, domain)
    assert all(n["status"] == "READY" for n in doc["nodes"].values())
    assert fb.judge_imex(doc, nodes)["status"] == verdict


def test_a_degraded_domain_warns_naming_the_nodes_and_this_nodes_own_failure_fails():
    # the real 18-node table with node 5 gone (a constructed variation of the real sample: status and
    # its row and column changed the way nvidia-imex-ctl prints an unreachable node)
    text = (REAL / "imex-ctl-gb200-aws-18node-up.txt").read_text()
    text = text.replace("Node #5   - 172.31.50.44    - READY", "Node #5   - 172.31.50.44    - UNAVAILABLE")
    lines = [l if not l.strip().startswith("5 ") else l.replace("C", "N") for l in text.splitlines()]
    text = "\n".join(lines).replace("Domain State: UP", "Domain State: DEGRADED")
    r = fb.judge_imex(fb.parse_imex_ctl(text), 18)
    assert r["status"] == "warn" and r["action"] == "none"
    assert "IMEX domain DEGRADED: 1 nodes not READY (#5 172.31.50.44 UNAVAILABLE), 18 node pairs" in r["message"]
    r = fb.judge_imex(fb.parse_imex_ctl("IMEX daemon status:\nNOT_READY\n"), 18)
    assert r["status"] == "fail" and "this node's IMEX daemon is NOT_READY" in r["message"]


def test_imex_is_not_judged_without_a_multi_node_domain_or_a_running_daemon(tmp_path):
    deadline = Deadline(5, count_process_age=False)
    [r] = fb.check_imex({"imex_nodes_config": str(tmp_path / "absent.cfg")}, deadline)
    assert r["status"] == "skipped" and "no IMEX domain configured" in r["message"]
    one = tmp_path / "one.cfg"
    one.write_text("# single node\n10.0.0.1\n")
    [r] = fb.check_imex({"imex_nodes_config": str(one)}, deadline)
    assert r["status"] == "skipped" and "single-node IMEX domain" in r["message"]
    two = tmp_path / "two.cfg"
    two.write_text("10.0.0.1\n10.0.0.2\n")
    assert not fb.imex_daemon_running()  # this machine runs no nvidia-imex
    [r] = fb.check_imex({"imex_nodes_config": str(two)}, deadline)
    assert r["status"] == "skipped" and "not judged on an idle node" in r["message"]


def test_nvlink_error_counters_are_judged_as_rises_never_as_totals():
    per_gpu = fb.parse_nvlink_errors((REAL / "smi-nvlink-e-a100-sxm4-535-clean.txt").read_text())
    assert sorted(per_gpu) == [0, 1] and len(per_gpu[0]) == 12
    assert per_gpu[0][11] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    record = {"gpus": [{"index": 0, "uuid": "GPU-a", "nvlink": [{"link": i, "active": True} for i in range(12)]}]}
    fb.merge_nvlink_errors(record, (REAL / "smi-nvlink-e-a100-sxm4-535-clean.txt").read_text())
    state, gpus = {}, record["gpus"]
    gpus[0]["nvlink"][3]["recovery_errors"] = 7  # a total from before: read once, not judged
    fb.nvlink_rises(gpus, state, "boot1", 1000.0)
    assert fb.nvlink_error_verdict(gpus[0]["nvlink"]) is None
    gpus[0]["nvlink"][3]["recovery_errors"] = 9
    fb.nvlink_rises(gpus, state, "boot1", 1600.0)
    assert fb.nvlink_error_verdict(gpus[0]["nvlink"]) == (
        "warn", "inspect-hardware", "2 NVLink recovery errors in 600 s (link 3)")
    [r] = [r for r in judge_gpus({"gpus": gpus}, {"nvlinks": 12}, {}) if r["code"] == "gpu.nvlink"]
    assert r["status"] == "warn" and r["subject"] == "gpu0"
    fb.nvlink_rises(gpus, state, "boot2", 1700.0)  # another boot: the counters started anew
    assert not any("rises" in l for l in gpus[0]["nvlink"]) and fb.nvlink_error_verdict(gpus[0]["nvlink"]) is None


# sample -> (running, configured, nothing_to_do, failed)
FABRIC_MANAGER = {
    "fabricmanager-aws-nvl5-systemctl-active-probe.txt": (True, False, False, False),
    "fabricmanager-h20-journal-pre-nvl5-configured.txt": (False, True, False, False),
    "fabricmanager-a40-nv-warn-nothing-to-do-zh-locale.txt": (False, False, True, True),
    "fabricmanager-rtx4090-pre-nvl5-nothing-to-do.txt": (False, False, True, True),
}


@pytest.mark.parametrize("name", sorted(FABRIC_MANAGER))
def test_fabric_manager_samples(name):
    s = fb.fabric_manager_state((REAL / name).read_text())
    assert (s["running"], s["configured"], s["nothing_to_do"], s["failed"]) == FABRIC_MANAGER[name], s


def test_a_chinese_locale_journal_line_has_its_time():
    line = (REAL / "fabricmanager-a40-nv-warn-nothing-to-do-zh-locale.txt").read_text().splitlines()[3]
    t = line_time(line[:line.index("leon")], 1e6)
    assert time.localtime(t)[1:6] == (11, 15, 14, 15, 47)
