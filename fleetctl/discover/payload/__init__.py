"""The node side of `fleetctl site discover`: one stdlib-only module, shipped after the node-check
payload modules whose collectors it reuses (sysfs and netlink readers, NVML/nvidia-smi, meminfo)."""
