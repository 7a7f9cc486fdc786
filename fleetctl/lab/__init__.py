"""fleetctl lab: an emulated GPU cluster on one Linux machine (namespaces, routed fabric, Slurm, sshd)."""
