"""The HDF5 run store (schema: docs/hdf5-schema.md): `runfile` writes a probe run crash-safely,
`reader` opens one, hostile input included. Atomic writes themselves are `fleetctl.atomic`."""
