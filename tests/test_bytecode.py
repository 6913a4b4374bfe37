"""The suite's processes keep the bytecode they compile (tests/conftest.py ``pytest_configure``; docs/performance.md,
"Where the 26 minutes go"): under ``PYTHONDONTWRITEBYTECODE`` — set by this machine's image — each of the suite's
hundreds of Python processes compiled the project's modules from source again."""

from __future__ import annotations

import os
import sys

import pytest


def test_the_suites_processes_may_write_bytecode(request: pytest.FixtureRequest) -> None:
    # Whatever the shell set: gone from the environment every process the tests start inherits.
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    if hasattr(request.config, "workerinput"):  # an xdist worker, started after the controller cleared it
        assert sys.dont_write_bytecode is False
