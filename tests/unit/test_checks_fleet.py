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


def test_without_a_site_everything_is_one_group():
    docs = {"a": doc(), "b": doc(), "c": doc(gpu__count=7)}
    f = {(x["code"], x["subject"]): x for x in fleet_consistency(docs)}
    assert f[("fleet.gpu.count", "")]["nodes"] == "c" and f[("fleet.gpu.count", "")]["status"] == "warn"
