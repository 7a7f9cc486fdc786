"""Simulated GPU state and kernel logs of lab hosts, in the formats of docs/simulated-gpus.md.

Only for hosts built with --gpus-per-host: the lab has no GPUs. Every file says `"simulated": true`.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from fleetctl.errors import UsageError

MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
CUDA = "12.4"
VBIOS = "96.00.89.00.01"
# PCI buses of the eight GPUs of an HGX H100 board.
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "19", "2b", "3b", "5e", "9b", "ac", "bb", "dc")
NVLINKS = 18

# Message texts of the Xids as the driver prints them (after "Xid (PCI:...): N, ").
XID_TEXT = {
    13: "pid=2311, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "pid=2311, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
        "faulted @ 0x7f1a_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    43: "pid=2311, name=python3, Ch 00000010",
    45: "pid=2311, name=python3, Ch 00000010",
    48: "pid=2311, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition 0, subpartition 0.",
    63: "pid='<unknown>', name=<unknown>, Row Remapper: New row (0x00000000000a1b2c) marked for "
        "remapping, reset gpu to activate.",
    64: "pid='<unknown>', name=<unknown>, Row Remapper: Failed to mark row for remapping",
    74: "pid=2311, name=python3, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, "
        "0x0, 0x0)",
    79: "pid=2311, name=python3, GPU has fallen off the bus.",
    92: "pid='<unknown>', name=<unknown>, High single-bit ECC error rate",
    94: "pid=2311, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
    95: "pid=2311, name=python3, Uncontained: SM (0x1). RST: Yes, D-RST: No",
    119: "pid=2311, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected "
         "function 76 (GSP_RM_CONTROL) (0x2080014b 0x5).",
}


def healthy_gpu(node_index: int, index: int) -> dict:
    return {
        "index": index,
        "name": MODEL,
        "uuid": f"GPU-5e0f6c1a-{node_index:04x}-4000-8000-{index:012x}",
        "serial": f"16549220{node_index:03d}{index:02d}",
        "pci_bus_id": f"00000000:{BUSES[index]}:00.0",
        "vbios_version": VBIOS,
        "persistence_mode": True,
        "temperature_c": 34,
        "memory_temperature_c": 41,
        "slowdown_temp_c": 87,
        "shutdown_temp_c": 92,
        "power_w": 71.5,
        "power_limit_w": 700.0,
        "ecc_mode": True,
        "ecc": {"volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 0, "aggregate_dbe": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": {"sbe": 0, "dbe": 0, "pending": False},
        "throttle_reasons": [],
        "pcie": {"gen": 5, "max_gen": 5, "width": 16, "max_width": 16},
        "nvlink": [{"link": n, "active": True, "crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}
                   for n in range(NVLINKS)],
    }


def host_dir(lab: Path, node: str) -> Path:
    return lab / "hosts" / node


def write_host(lab: Path, node: str, node_index: int, gpus: int) -> None:
    d = host_dir(lab, node)
    d.mkdir(parents=True, exist_ok=True)
    doc = {"simulated": True, "source": "simulated", "driver_version": DRIVER, "cuda_version": CUDA,
           "gpus": [healthy_gpu(node_index, i) for i in range(gpus)]}
    _write_json(d / "gpus.json", doc)
    (d / "kern.log").touch()


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)  # readers never see a half-written file


def _load(lab: Path, node: str) -> dict:
    path = host_dir(lab, node) / "gpus.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{node}: no simulated GPUs (lab built without --gpus-per-host)") from None


def _gpu(doc: dict, node: str, index: int) -> dict:
    for gpu in doc["gpus"]:
        if gpu["index"] == index:
            return gpu
    raise UsageError(f"{node}:gpu{index}: no such GPU ({node} has {len(doc['gpus'])})")


def xid_line(gpu: dict, xid: int, when: float | None = None) -> str:
    """One kernel-log line as `dmesg --time-format iso` prints it."""
    ts = datetime.fromtimestamp(when if when is not None else time.time(), timezone.utc)
    stamp = ts.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
    domain, bus, rest = gpu["pci_bus_id"].split(":")
    pci = f"{domain[-4:]}:{bus}:{rest.split('.')[0]}"
    text = XID_TEXT.get(xid, "pid=2311, name=python3, Xid error")
    return f"{stamp} NVRM: Xid (PCI:{pci}): {xid}, {text}"


def apply_fault(lab: Path, node: str, index: int, kind: str, value) -> None:
    """Change one GPU's state (and, for an Xid, append a kernel-log line)."""
    doc = _load(lab, node)
    gpu = _gpu(doc, node, index)
    if kind == "xid":
        with open(host_dir(lab, node) / "kern.log", "a") as log:
            log.write(xid_line(gpu, int(value)) + "\n")
        if int(value) == 48:
            gpu["ecc"]["volatile_dbe"] += 1
            gpu["ecc"]["aggregate_dbe"] += 1
    elif kind == "ecc_dbe":
        gpu["ecc"]["volatile_dbe"] += 1
        gpu["ecc"]["aggregate_dbe"] += 1
    elif kind == "remap_pending":
        gpu["remapped_rows"]["uncorrectable"] += 1
        gpu["remapped_rows"]["pending"] = True
    elif kind == "temp":
        gpu["temperature_c"] = int(value)
        if int(value) >= gpu["slowdown_temp_c"]:
            gpu["throttle_reasons"] = sorted(set(gpu["throttle_reasons"]) | {"hw_thermal_slowdown"})
    elif kind == "pcie_width":
        gpu["pcie"]["width"] = int(value)
    else:
        raise UsageError(f"unknown GPU fault {kind!r}")
    _write_json(host_dir(lab, node) / "gpus.json", doc)


def clear_gpu(lab: Path, node: str, node_index: int, index: int, *, repaired_by_reboot: bool = False) -> None:
    """Back to the healthy state. Clearing an Xid models its repair, which ends in a reboot: the
    host's kernel log starts anew (the old one is kept as kern.log.1), as /dev/kmsg would after a
    reboot. Other GPU faults are repaired by a GPU reset: the kernel log keeps its lines."""
    if repaired_by_reboot:
        log = host_dir(lab, node) / "kern.log"
        if log.exists():
            with open(log.with_name("kern.log.1"), "a") as old:
                old.write(log.read_text())
            log.write_text("")
    doc = _load(lab, node)
    doc["gpus"] = [healthy_gpu(node_index, index) if g["index"] == index else g for g in doc["gpus"]]
    _write_json(host_dir(lab, node) / "gpus.json", doc)
