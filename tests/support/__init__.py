"""Code only the tests and the benchmarks use: synthetic fabrics, fault models and probe runs."""
