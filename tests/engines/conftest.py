"""Engines built from configs the way the runner builds them, against recorded endpoints."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # fixture_server, beside these tests
