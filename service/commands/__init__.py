"""The ``coxswain`` subcommands with more to them than a few lines."""
