"""Fleet consistency: values that differ from the site file or the class majority, outliers named."""

import copy

from fleetctl.checks import fleet_consistency
from fleetctl.config.site import parse_site

SITE = """
[cluster]
name = "t"
[[node_classes]]
name = "h100"
nodes = "gpu[01-05]"
gpus = { count = 8, driver_version = "550.54.15" }
nics = [{ name = "mlx5_0", kind = "infiniband", mtu = 4096 }, { name = "eth1" }]
[[node_classes]]
name = "cpu"
nodes = "cpu[1-2]"
"""


def doc(**over):
    facts = {
        "gpu": {"count": 8, "models": ["NVIDIA H100 80GB HBM3"], "driver_version": "550.54.15",
                "cuda_version": "12.4", "vbios_versions": ["96.00.89.00.01"]},
        "host": {"cpus": 224, "memory_gb": 2015.6, "kernel": "6.1.0-18-amd64", "nvidia_kernel_module": "550.54.15"},
        "nics": {"mlx5_0": {"firmware": "28.39.1002", "ports": {"1": {"rate_gbps": 400.0}}, "mtu": 4096},
                 "eth1": {"mtu": 9000, "rate_gbps": 100.0}},
    }
    d = {"facts": copy.deepcopy(facts)}
    for path, value in over.items():
        section, _, key = path.partition("__")
        target = d["facts"]
        for part in section.split("_"):
            target = target.setdefault(part, {})
        target[key] = value
    return d


def fleet(docs, site_text=SITE):
    return {(f["code"], f["subject"]): f for f in fleet_consistency(docs, parse_site(site_text))}


def test_identical_fleet_has_no_findings():
    assert fleet({f"gpu0{i}": doc() for i in range(1, 6)}) == {}


def test_site_file_mismatch_is_a_failure_naming_the_outliers():
    docs = {f"gpu0{i}": doc() for i in range(1, 6)}
    docs["gpu03"] = doc(gpu__driver_version="535.129.03")
    docs["gpu04"] = doc(gpu__driver_version="535.129.03")
    f = fleet(docs)[("fleet.gpu.driver_version", "")]
    assert f["status"] == "fail" and f["nodes"] == "gpu[03-04]"
    assert f["evidence"]["values"] == {"550.54.15": "gpu[01-02,05]", "535.129.03": "gpu[03-04]"}


def test_majority_outliers_mtu_firmware_rate():
    docs = {f"gpu0{i}": doc() for i in range(1, 6)}
    docs["gpu02"]["facts"]["nics"]["eth1"]["mtu"] = 1500
    docs["gpu05"]["facts"]["nics"]["mlx5_0"]["firmware"] = "28.36.1010"
    docs["gpu04"]["facts"]["nics"]["mlx5_0"]["ports"]["1"]["rate_gbps"] = 200.0
    f = fleet(docs)
    mtu = f[("fleet.nic.mtu", "eth1")]
    assert mtu["status"] == "warn" and mtu["nodes"] == "gpu02" and mtu["evidence"]["majority"] == 9000
    assert "eth1" in mtu["message"] and "gpu02" in mtu["message"]
    assert f[("fleet.nic.firmware", "mlx5_0")]["nodes"] == "gpu05"
    assert f[("fleet.nic.rate_gbps", "mlx5_0/1")]["nodes"] == "gpu04"
    assert ("fleet.nic.mtu", "mlx5_0") not in f


def test_no_majority_names_every_group_and_classes_are_separate():
    docs = {"cpu1": doc(host__kernel="6.1.0-18-amd64"), "cpu2": doc(host__kernel="6.1.0-20-amd64"),
            "gpu01": doc(host__kernel="6.1.0-99"), "gpu02": doc(), "gpu03": doc()}
    f = fleet(docs)
    kernel = [x for x in fleet_consistency(docs, parse_site(SITE)) if x["code"] == "fleet.host.kernel"]
    assert {k["nodes"] for k in kernel} == {"cpu[1-2]", "gpu01"}
    tie = next(k for k in kernel if k["nodes"] == "cpu[1-2]")
    assert "no majority" in tie["message"] and "class cpu" in tie["message"]


def test_unanswered_nodes_are_ignored_and_baselines_are_relative():
    docs = {f"gpu0{i}": doc(deep__nccl_busbw_gbs=48.0) for i in range(1, 5)}
    docs["gpu05"] = None
    docs["gpu03"] = doc(deep__nccl_busbw_gbs=31.0, host__memory_gb=1511.0)
    f = fleet(docs)
    bw = f[("fleet.deep.nccl_busbw", "")]
    assert bw["status"] == "fail" and bw["nodes"] == "gpu03"
    assert f[("fleet.host.memory_gb", "")]["nodes"] == "gpu03"
    assert bw["evidence"]["median"] == 48.0


def test_ib_write_bw_baseline_per_nic():
    docs = {f"gpu0{i}": doc(deep__ib_write_bw_gbps={"mlx5_0": 380.0, "mlx5_1": 381.0}) for i in range(1, 6)}
    docs["gpu02"] = doc(deep__ib_write_bw_gbps={"mlx5_0": 380.0, "mlx5_1": 190.0})
    f = fleet(docs)
    assert f[("fleet.deep.ib_write_bw", "mlx5_1")]["nodes"] == "gpu02"
    assert ("fleet.deep.ib_write_bw", "mlx5_0") not in f


def test_without_a_site_everything_is_one_group():
    docs = {"a": doc(), "b": doc(), "c": doc(gpu__count=7)}
    f = {(x["code"], x["subject"]): x for x in fleet_consistency(docs)}
    assert f[("fleet.gpu.count", "")]["nodes"] == "c" and f[("fleet.gpu.count", "")]["status"] == "warn"


# ------------------------------------------------------------------ escalation and epilog changes
from fleetctl.checks.followup import changes, hardware_failures, next_level, suspects  # noqa: E402


def res(code, status, subject="", **evidence):
    return {"code": code, "status": status, "message": code, "action": "none", "subject": subject,
            "evidence": evidence}


def test_suspects_and_next_level():
    docs = {"a": {"results": [res("gpu.ecc", "ok")]},
            "b": {"results": [res("gpu.throttle", "warn")]},
            "c": {"results": [res("xid.budget", "error")]},
            "d": {"results": [res("xid.79", "fail")]}, "e": None}
    assert suspects(docs) == ["b", "c"]
    assert next_level("quick") == "standard" and next_level("deep") is None


def test_changes_between_prolog_and_epilog():
    before = {"results": [res("xid.scan", "ok"), res("gpu.ecc", "ok", **{"gpu0": {"volatile_dbe": 0, "volatile_sbe": 1}}),
                          res("nic.counters", "ok", "eth1", values={"carrier_changes": 4})]}
    after = {"results": [res("xid.scan", "ok"), res("xid.48", "fail", "0000:18:00"),
                         res("gpu.ecc", "fail", "gpu0", **{"gpu0": {"volatile_dbe": 2, "volatile_sbe": 1}}),
                         res("nic.counters", "ok", "eth1", values={"carrier_changes": 6})]}
    c = {(x["code"], x["subject"]): x for x in changes(before, after)}
    assert c[("change.xid.48", "0000:18:00")]["message"].endswith("(new)")
    ecc = c[("change.gpu.ecc", "gpu0")]
    assert ecc["status"] == "fail" and ecc["evidence"] == {"counter": "volatile_dbe", "before": 0, "after": 2}
    assert c[("change.nic.carrier", "eth1")]["evidence"] == {"before": 4, "after": 6}
    assert changes(after, after) == []


def test_ecc_change_is_reported_once_per_gpu():
    before = {"results": [res("gpu.ecc", "ok", **{"gpu0": {"volatile_dbe": 0}, "gpu1": {"volatile_dbe": 0}})]}
    after = {"results": [res("gpu.ecc", "fail", "gpu0,gpu1", **{"gpu0": {"volatile_dbe": 1},
                                                               "gpu1": {"volatile_dbe": 3}})]}
    assert [(c["code"], c["subject"]) for c in changes(before, after)] == [("change.gpu.ecc", "gpu0"),
                                                                           ("change.gpu.ecc", "gpu1")]


def test_hardware_failures_exclude_config_mismatches_and_budget():
    xid = dict(res("xid.79", "fail"), action="reboot")
    doc = {"results": [xid, dict(res("host.kernel", "fail"), action="drain"), res("xid.budget", "error"),
                       dict(res("gpu.throttle", "warn"), action="inspect-hardware")]}
    assert hardware_failures(doc) == [xid]
