"""`fleetctl lens`: continuous fabric monitoring (docs/lens.md).

    lens run [--foreground] [NODESET]   the coordinator (daemonises with a pid file by default)
    lens status                         health per element now, agents, clocks, open events
    lens events [--since] [--follow] [--open]
    lens records [--node] [--flow] [--since]   sampled per-probe records (lens.debug_records)
    lens stop
    lens agent [--coordinator HOST:PORT]   a node's registered probe agent (a service)
    lens keygen PATH                     the key registered agents share with the coordinator
    lens shards [--max-hosts N]          the site's shards (whole pods) and the switches they share
    lens merge --from DIR... [--once]    join the shards' windows: shared switches, one finding each

The work is in fleetctl.lens (service.py runs the coordinator, status.py reads its state); this
package parses and renders. Exit codes (docs/exit-codes.md): status 0 healthy, 1 warnings (an agent
down or overloaded, a warning event open), 2 a critical event open, 3 no coordinator running;
events 0; records 0; stop 0 stopped, 1 none was running; agent 0 when stopped by a signal, 3 when
it cannot start (no coordinator, a bad key file); keygen 0; shards 0; merge --once 0 all shards in
and nothing found, 1 a shard missing or a finding, 2 a critical finding.
"""

from __future__ import annotations

import click

from fleetctl.cli.app import common_options
from fleetctl.cli.lens import agent, events, records, run, shards, status, stop


@click.group()
@common_options
def lens() -> None:
    """Continuous probing of a running cluster: events per fabric element, with the jobs they
    touch (docs/lens.md)."""


for _command in (run.run_cmd, status.status_cmd, events.events_cmd, records.records_cmd,
                 stop.stop_cmd, agent.agent_cmd, agent.keygen_cmd, shards.shards_cmd, shards.merge_cmd):
    lens.add_command(_command)
