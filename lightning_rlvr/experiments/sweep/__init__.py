"""Sweeps: run a grid of fits, archive each finished run, and report paired comparisons."""
