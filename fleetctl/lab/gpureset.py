"""The lab's GPU reset, run on a lab node by act's remediation ladder in place of nvidia-smi (the
lab's site file sets `act.gpu_busy_command` and `act.gpu_reset_command` to this module):

    python -m fleetctl.lab.gpureset --busy NODE GPU   # the PIDs on the GPU, one a line (none: idle)
    python -m fleetctl.lab.gpureset NODE GPU          # reset: the GPU's simulated faults cleared

GPU is an index or a PCI bus id, as nvidia-smi -i takes them. A reset clears the GPU's state
(gpus.json) and its faults in the lab's fault list, and keeps the kernel log as it is, as a real reset
does: the Xid lines stay, and the re-audit counts only what comes after the reset. A test makes a GPU
busy by writing PIDs to `hosts/NODE/gpuN.busy`.
"""

from __future__ import annotations

import argparse
import json
import sys

from fleetctl.errors import FleetctlError, UsageError
from fleetctl.lab import gpusim, paths, state


def _index(node: str, gpu: str) -> int:
    doc = json.loads((gpusim.host_dir(paths.lab_dir(), node) / "gpus.json").read_text())
    if gpu.isdigit():
        return int(gpu)
    want = _bus(gpu)
    for g in doc["gpus"]:
        if _bus(g["pci_bus_id"]) == want:
            return int(g["index"])
    raise UsageError(f"{node}: no GPU at {gpu!r}")


def _bus(text: str) -> tuple[str, str, str]:
    domain, bus, rest = text.lower().split(":")
    return domain[-4:], bus, rest.split(".")[0]


def busy(node: str, index: int) -> list[str]:
    path = gpusim.host_dir(paths.lab_dir(), node) / f"gpu{index}.busy"
    return path.read_text().split() if path.exists() else []


def reset(node: str, index: int) -> None:
    with state.locked():
        st = state.load()
        node_index = int(node[4:])
        gpusim.clear_gpu(paths.lab_dir(), node, node_index, index, repaired_by_reboot=False)
        st["faults"] = [f for f in st.get("faults", []) if not (f.get("node") == node and f.get("gpu") == index)]
        state.save(st)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetctl.lab.gpureset")
    parser.add_argument("--busy", action="store_true", help="print the PIDs on the GPU instead")
    parser.add_argument("node")
    parser.add_argument("gpu")
    args = parser.parse_args(argv)
    try:
        index = _index(args.node, args.gpu)
        if args.busy:
            print("\n".join(busy(args.node, index)))
        else:
            reset(args.node, index)
            print(f"GPU {index} of {args.node} reset (simulated)")
    except (FleetctlError, OSError, ValueError, KeyError) as exc:
        print(f"gpureset: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
