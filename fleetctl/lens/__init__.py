"""fleetctl lens: continuous fabric monitoring (probing, events) and its outputs: the JSON-lines
event log (`eventlog`), webhook delivery (`webhook`), Prometheus metrics (`metrics`) and rolling
HDF5 segments (`segments`). docs/lens.md."""
