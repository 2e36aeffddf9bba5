"""Coordinator processes for worker tests (the service tests' fixture)."""

from tests.service.conftest import start_server

__all__ = ["start_server"]
