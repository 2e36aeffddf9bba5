"""Runnable example apps for ``coxswain worker`` (see README.md here)."""
