"""What this node's sysfs says about its NICs: NUMA node, PCIe switch, InfiniBand port states.

Every read is bounded and tolerant: a missing file means "unknown", never an error, since the plan
and the watch also run on machines without the hardware. `root` lets tests point at a fake tree.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

_PCI_ADDR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_PORT_STATE = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z_]+)\s*$")
MAX_READ = 4096
MAX_DEVICES = 256


@dataclass(frozen=True)
class Affinity:
    numa_node: int | None = None  # None: unknown (no sysfs entry, or the kernel says -1)
    pcie_switch: str = ""  # PCI address of the switch's upstream port; "" unknown or a root port
    pci_address: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def read_small(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_READ).decode("ascii", "replace").strip()
    except OSError:
        return None


def _device_dir(root: Path, name: str) -> Path | None:
    for cls in ("net", "infiniband"):
        path = root / "class" / cls / name / "device"
        if path.exists():
            return path
    return None


def affinity(name: str, root: str | os.PathLike = "/sys") -> Affinity:
    """NUMA node and PCIe switch of a netdev or InfiniBand device (e.g. eth0, mlx5_0)."""
    if not name or "/" in name or name in (".", ".."):
        return Affinity()
    root = Path(root)
    device = _device_dir(root, name)
    if device is None:
        return Affinity()
    numa_text = read_small(device / "numa_node")
    numa = int(numa_text) if numa_text and re.fullmatch(r"-?\d{1,4}", numa_text) else None
    if numa is not None and numa < 0:
        numa = None
    chain = [part for part in Path(os.path.realpath(device)).parts if _PCI_ADDR.match(part)]
    address = chain[-1] if chain else ""
    # device <- switch downstream port <- switch upstream port <- root port: the upstream port names
    # the switch. A device straight on a root port (chain of 1 or 2) has no switch.
    switch = chain[-3] if len(chain) >= 4 else ""
    return Affinity(numa, switch, address)


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ...
    phys_state: str = ""  # LinkUp, Polling, Disabled, ...

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


def parse_port_state(text: str | None) -> str:
    """'4: ACTIVE' -> 'ACTIVE'; anything else -> ''."""
    m = _PORT_STATE.match(text or "")
    return m.group(2).upper() if m else ""


def parse_phys_state(text: str | None) -> str:
    """'5: LinkUp' -> 'LinkUp' (case kept, as the kernel writes it)."""
    m = _PORT_STATE.match(text or "")
    return m.group(2) if m else ""


def ib_ports(root: str | os.PathLike = "/sys") -> list[IbPort]:
    """Every InfiniBand (and RoCE) port under <root>/class/infiniband; [] when there is none."""
    base = Path(root) / "class" / "infiniband"
    out: list[IbPort] = []
    try:
        devices = sorted(os.listdir(base))[:MAX_DEVICES]
    except OSError:
        return out
    for dev in devices:
        try:
            ports = sorted(os.listdir(base / dev / "ports"))[:MAX_DEVICES]
        except OSError:
            continue
        for port in ports:
            if not port.isdigit() or len(port) > 4:
                continue
            state = parse_port_state(read_small(base / dev / "ports" / port / "state"))
            if state:
                phys = parse_phys_state(read_small(base / dev / "ports" / port / "phys_state"))
                out.append(IbPort(dev, int(port), state, phys))
    return out
