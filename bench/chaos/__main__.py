"""``python -m bench.chaos``."""

from bench.chaos.run import main

main()
