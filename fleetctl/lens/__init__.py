"""fleetctl lens: continuous probing of a running cluster, one analysis window at a time.

    coordinator.py  agents kept alive (agents.py), streamed records joined (ingest.py), windows
                    analysed (window.py) with carried state (baseline.py, clocktrack.py), events
                    (events.py) with affected jobs (jobs.py), state resumed (state.py)
    daemon.py       pid file, background start, stop
The CLI is fleetctl/cli/lens.py; the event log format is in docs/lens.md.
"""
