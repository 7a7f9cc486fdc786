"""Fleet consistency over per-node result documents: what differs from the site file or the majority.

Nodes are compared within their node class (all together without a site). A value that differs from
the site file's expectation is a `fail`; one that only differs from the class majority is a `warn`;
a deep-test bandwidth below 90 % of the class median is a `fail` (fleet-relative baseline).
"""

from __future__ import annotations

import statistics
from collections import Counter

from fleetctl.nodeset import fold

BASELINE_FRACTION = 0.9  # a node below 90 % of its class median bandwidth is an outlier
MEMORY_FRACTION = 0.95  # memory may be up to 5 % below the class median (firmware reservations)


def node_facts(doc: dict) -> dict:
    """Flatten a result document's facts into {(code, subject): value} for comparison."""
    f = doc.get("facts") or {}
    gpu, host = f.get("gpu") or {}, f.get("host") or {}
    out = {
        ("fleet.gpu.count", ""): gpu.get("count"),
        ("fleet.gpu.model", ""): ", ".join(gpu["models"]) if gpu.get("models") else None,
        ("fleet.gpu.driver_version", ""): gpu.get("driver_version"),
        ("fleet.gpu.cuda_version", ""): gpu.get("cuda_version"),
        ("fleet.gpu.vbios_version", ""): ", ".join(gpu["vbios_versions"]) if gpu.get("vbios_versions") else None,
        ("fleet.host.cpus", ""): host.get("cpus"),
        ("fleet.host.kernel", ""): host.get("kernel"),
        ("fleet.host.nvidia_kernel_module", ""): host.get("nvidia_kernel_module"),
    }
    for name, nic in (f.get("nics") or {}).items():
        out[("fleet.nic.firmware", name)] = nic.get("firmware")
        out[("fleet.nic.mtu", name)] = nic.get("mtu")
        out[("fleet.nic.rate_gbps", name)] = nic.get("rate_gbps")
        for port, p in (nic.get("ports") or {}).items():
            out[("fleet.nic.rate_gbps", f"{name}/{port}")] = p.get("rate_gbps")
        out[("fleet.nic.pcie_width", name)] = (nic.get("pcie") or {}).get("width")
    return {k: v for k, v in out.items() if v is not None}


def expected_facts(cls) -> dict:
    """{(code, subject): value} the site file demands of a node class (only keys it sets)."""
    want = {
        ("fleet.gpu.count", ""): cls.gpus.count or None,
        ("fleet.gpu.model", ""): cls.gpus.model or None,
        ("fleet.gpu.driver_version", ""): cls.gpus.driver_version or None,
        ("fleet.gpu.vbios_version", ""): cls.gpus.vbios_version or None,
        ("fleet.host.cpus", ""): cls.cpus or None,
        ("fleet.host.kernel", ""): cls.kernel_version or None,
    }
    for nic in cls.nics:
        want[("fleet.nic.firmware", nic.name)] = nic.firmware or None
        want[("fleet.nic.mtu", nic.name)] = nic.mtu or None
    return {k: v for k, v in want.items() if v is not None}


def fleet_consistency(docs: dict, cluster=None) -> list[dict]:
    """Findings over {node: result document or None (no answer)}; each names its outlier nodes."""
    groups: dict[str, dict] = {}
    for node, doc in docs.items():
        if not doc:
            continue
        cls = cluster.node_class(node) if cluster is not None else None
        groups.setdefault(cls.name if cls else "", {"cls": cls, "docs": {}})["docs"][node] = doc
    findings = []
    for name, group in sorted(groups.items()):
        findings += _compare_class(name, group["cls"], group["docs"])
    return findings


def _finding(code, subject, status, message, outliers, evidence, action="drain"):
    return {"code": code, "status": status, "message": message, "action": action, "subject": subject,
            "nodes": fold(outliers), "evidence": evidence}


def _compare_class(class_name, cls, docs):
    facts = {node: node_facts(doc) for node, doc in docs.items()}
    expected = expected_facts(cls) if cls is not None else {}
    keys = sorted({k for f in facts.values() for k in f} | set(expected))
    where = f" in class {class_name}" if class_name else ""
    out = []
    for key in keys:
        code, subject = key
        values = {node: f[key] for node, f in facts.items() if key in f}
        if not values:
            continue
        by_value: dict = {}
        for node, value in sorted(values.items()):
            by_value.setdefault(value, []).append(node)
        label = f"{code.removeprefix('fleet.')}{' of ' + subject if subject else ''}"
        evidence = {"values": {str(v): fold(n) for v, n in by_value.items()}}
        if key in expected:
            want = expected[key]
            bad = [n for n, v in values.items() if v != want]
            if bad:
                evidence["expected"] = want
                out.append(_finding(code, subject, "fail", f"{label} differs from the site file ({want}) on "
                                    f"{fold(bad)}{where}", bad, evidence))
            continue
        if len(by_value) < 2:
            continue
        counts = Counter(values.values()).most_common()
        if counts[0][1] == counts[1][1]:  # no majority: name every group
            out.append(_finding(code, subject, "warn", f"{label} differs across nodes{where} with no "
                                f"majority: " + "; ".join(f"{v}: {s}" for v, s in evidence["values"].items()),
                                sorted(values), evidence, "none"))
            continue
        majority = counts[0][0]
        bad = [n for n, v in values.items() if v != majority]
        evidence["majority"] = majority
        out.append(_finding(code, subject, "warn", f"{label} on {fold(bad)} differs from the "
                            f"majority ({majority}){where}", bad, evidence, "none"))
    out += _memory_baseline(docs, where)
    out += _bandwidth_baseline(docs, where)
    return out


def _memory_baseline(docs, where):
    mem = {n: ((d.get("facts") or {}).get("host") or {}).get("memory_gb") for n, d in docs.items()}
    mem = {n: v for n, v in mem.items() if v}
    if len(mem) < 2:
        return []
    median = statistics.median(mem.values())
    bad = sorted(n for n, v in mem.items() if v < median * MEMORY_FRACTION)
    if not bad:
        return []
    return [_finding("fleet.host.memory_gb", "", "warn", f"memory on {fold(bad)} is more than 5 % "
                     f"below the median {median:g} GiB{where}", bad,
                     {"median": median, "values": {n: mem[n] for n in bad}}, "inspect-hardware")]


def _bandwidth_baseline(docs, where):
    """Deep-test bandwidths against the class median: NCCL bus bandwidth, ib_write_bw per NIC."""
    series = {("fleet.deep.nccl_busbw", ""): {n: _deep(d).get("nccl_busbw_gbs") for n, d in docs.items()}}
    for node, doc in docs.items():
        for nic, gbps in (_deep(doc).get("ib_write_bw_gbps") or {}).items():
            series.setdefault(("fleet.deep.ib_write_bw", nic), {})[node] = gbps
    out = []
    for (code, subject), values in sorted(series.items()):
        values = {n: v for n, v in values.items() if v}
        if len(values) < 3:  # a baseline of fewer than three nodes says nothing about which one is slow
            continue
        median = statistics.median(values.values())
        bad = sorted(n for n, v in values.items() if v < median * BASELINE_FRACTION)
        if bad:
            what = "NCCL bus bandwidth" if not subject else f"ib_write_bw of {subject}"
            unit = "GB/s" if not subject else "Gb/s"
            out.append(_finding(code, subject, "fail", f"{what} on {fold(bad)} is below 90 % of "
                                f"the fleet median {median:.1f} {unit}{where}", bad,
                                {"median": median, "values": {n: values[n] for n in bad}}, "inspect-hardware"))
    return out


def _deep(doc) -> dict:
    return (doc.get("facts") or {}).get("deep") or {}
