"""95 % intervals of a cell's numbers from the cell's own data: pure functions, no I/O (docs/metrics.md, *Intervals*).

Imported by measure (which computes a cell's intervals once, beside its numbers) and by report (a comparison's
ratio and verdict). It imports no layer of its own package tree.
"""

from infermatrix.core.intervals.batches import Interval, batch_mean_interval, ratio_interval
from infermatrix.core.intervals.median import median_interval
from infermatrix.core.intervals.order_stats import quantile_interval
from infermatrix.core.intervals.ratio import Verdict, ratio_of, verdict_of
from infermatrix.core.intervals.tdist import T_LEVEL, t_quantile

__all__ = ["Interval", "batch_mean_interval", "ratio_interval", "quantile_interval", "median_interval", "Verdict", "ratio_of", "verdict_of",
           "T_LEVEL", "t_quantile"]
