"""credit_lab."""
