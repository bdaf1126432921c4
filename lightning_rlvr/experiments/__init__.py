"""Experiment tooling on top of the library: sweeps and the credit lab (nothing in the library imports it)."""
