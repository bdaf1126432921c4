"""The bottom layer: helpers that import nothing from the rest of the package."""
