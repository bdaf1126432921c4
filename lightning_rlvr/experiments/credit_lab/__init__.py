"""The credit lab: where each method puts its credit, against a Monte-Carlo oracle and first errors."""
