"""Offline analysis of NIC-mesh probe runs: clock synchronization, per-window path signals and
triangulation of faults to the smallest common element. No click, no rich: the CLI renders."""
