"""A site file whose nodes are directories under tmp_path: simulated GPUs (healthy H100s) and an
empty kernel log each, for CLI tests that run the real checks on this machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from test_checks_payload import sim_gpus  # noqa: E402

SITE = """
[cluster]
name = "t"
{access}
[checks]
kernel_log = "{dir}/{{node}}/kern.log"
simulated_gpus = "{dir}/{{node}}/gpus.json"
state_file = "{dir}/{{node}}/state.json"
[[node_classes]]
name = "h100"
nodes = "{nodes}"
memory_gb = 0.5
mounts = ["/"]
gpus = {{ count = 4, model = "NVIDIA H100 80GB HBM3", driver_version = "550.54.15" }}
nics = [{{ name = "lo", mtu = 65536 }}]
"""


def sim_site(directory: Path, nodes: list[str], *, transport: str | None = "local") -> Path:
    for node in nodes:
        (directory / node).mkdir()
        (directory / node / "gpus.json").write_text(json.dumps(sim_gpus()))
        (directory / node / "kern.log").write_text("")
    path = directory / "site.toml"
    access = f'[access]\ntransport = "{transport}"' if transport else ""
    path.write_text(SITE.format(dir=directory, nodes=",".join(nodes), access=access))
    return path
