"""matrix.client_nice: applied while the block runs, put back after; a refusal is reported, not raised."""

import subprocess
import sys

import pytest

SCRIPT = """
import os, json
from infermatrix.core.measure.priority import client_priority
before = os.getpriority(os.PRIO_PROCESS, 0)
rep = {}
with client_priority(before + 3, rep):
    inside = os.getpriority(os.PRIO_PROCESS, 0)
after = os.getpriority(os.PRIO_PROCESS, 0)
refused = {}
with client_priority(-20, refused):
    pass
print(json.dumps([before, inside, after, rep, refused, os.geteuid()]))
"""


@pytest.mark.slow
def test_nice_applies_inside_and_is_put_back():
    import json

    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, inside, after, rep, refused, euid = json.loads(out.stdout)
    assert inside == before + 3 and rep == {"nice": before + 3}
    if euid == 0:  # putting the priority back up needs the privilege an unprivileged user lacks
        assert after == before and refused == {"nice": -20}
    else:
        assert "could not set nice -20" in refused["error"]
