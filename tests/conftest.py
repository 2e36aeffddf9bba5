"""Test-wide settings: hypothesis profiles (COXSWAIN_HYPOTHESIS_PROFILE=thorough for more)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("COXSWAIN_HYPOTHESIS_PROFILE", "default"))
