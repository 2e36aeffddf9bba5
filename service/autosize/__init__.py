"""Sizing a job from its workers' heartbeat stats: the coordinator's window of samples and
its bucket signals (served at ``/autosize`` and ``/status``), and ``coxswain autosize``,
the loop that follows the recommendation."""
