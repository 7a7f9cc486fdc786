"""One mesh probe run end to end: plan, probe (fleetctl.mesh), analyse (fleetctl.analysis), store.

The composition layer above the probe side and the analysis side, which never import each other:
`probe_run` plans pairs and flows, traces paths, runs the agents and collects their records;
`analyze` turns a run's records into findings and writes or re-reads its HDF5 file.
"""
