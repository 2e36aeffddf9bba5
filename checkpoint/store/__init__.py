"""Checkpoint stores: where per-key-bucket checkpoint entries are kept."""
