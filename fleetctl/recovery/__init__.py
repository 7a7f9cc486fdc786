"""Recovery from inside a training job (docs/recovery.md). For now: each rank's progress
(`progress.Progress`, in the job) and the hang and straggler signals judged from it (`signals`,
`fleetctl job watch`), which go into lens's event log for act and `fleetctl explain`."""
