"""The tuner's search over numeric settings (``infermatrix tune``; docs/tuning.md, "The tuner"): the ranges and their
points (``space``) and the pure state machine that says which setting to probe next (``search``). Pure: no I/O; the
driver that runs each probe as a run of a sweep is ``core/run/tune.py``."""

from infermatrix.core.tune.search import ETA, OBJECTIVES, Answer, Probe, Result, Tuner, tied
from infermatrix.core.tune.space import Axis, log_points, midpoint, parse_over

__all__ = ["ETA", "OBJECTIVES", "Answer", "Axis", "Probe", "Result", "Tuner", "tied", "log_points", "midpoint", "parse_over"]
