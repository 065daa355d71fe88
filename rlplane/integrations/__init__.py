"""Integrations of the SDK with other training libraries (each imports its library; rlplane itself never does)."""
