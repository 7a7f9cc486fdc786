"""Fan-out: run one command on many nodes over ssh (paramiko), clush (ClusterShell and OpenSSH, with
gateways a tree), srun or locally, one HostResult per node.

    from fleetctl.fanout import get_transport
    with get_transport(site=site) as t:
        for r in t.run(["node1", "node2"], ["uname", "-r"], timeout=10):
            print(r.node, r.status, r.stdout)

Nothing here imports paramiko until the ssh transport is used.
"""

from fleetctl.fanout.base import FanoutOptions, Transport
from fleetctl.fanout.fold import Group, group_results
from fleetctl.fanout.payload import run_python
from fleetctl.fanout.registry import get_transport, transport_class, transports
from fleetctl.fanout.result import STATUSES, Command, HostResult

__all__ = ["Command", "FanoutOptions", "Group", "HostResult", "STATUSES", "Transport",
           "get_transport", "group_results", "run_python", "transport_class", "transports"]
