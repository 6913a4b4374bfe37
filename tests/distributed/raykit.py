"""Whether Ray is here: the distributed tests skip without it on a developer's machine and FAIL under CI=true."""

from __future__ import annotations

import pytest
from imxtest import in_ci


def require_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        why = "ray is not installed (pip install -e '.[test]' installs it)"
        if in_ci():
            pytest.fail(f"ray missing under CI=true: {why}", pytrace=False)
        pytest.skip(why)
