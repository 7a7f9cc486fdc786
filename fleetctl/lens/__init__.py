"""fleetctl lens: continuous fabric monitoring, one analysis window at a time (docs/lens.md).

    coordinator.py  agents kept alive (agents.py), streamed records joined (ingest.py), windows
                    analysed (window.py) with carried state (baseline.py, clocktrack.py), events
                    (events.py) with affected jobs (jobs.py), state resumed; daemon.py: pid file,
                    background start, stop
    outputs:        the JSON-lines event log (`eventlog`), webhook delivery (`webhook`),
                    Prometheus metrics (`metrics`), rolling HDF5 segments (`segments`), wired
                    together by outputs.py
The CLI is fleetctl/cli/lens.py.
"""
