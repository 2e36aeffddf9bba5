"""Helpers every layer may use (imports nothing of Coxswain's)."""
