"""NIC-mesh probing model: topology elements and paths, pair selection, the HDF5 run store."""
