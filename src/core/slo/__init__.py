"""Service-level objectives as data: limits on per-request metrics, judged per cell from stored records.

The spec (what a user writes: ``--slo ttft_p99_ms=2000,tpot_p99_ms=50``, ``mlperf:llama3.1-8b``, an
``[slo]`` table) is parsed here; the judging is SQL (views ``slo_cells`` and ``slo_capacity``, in
``infermatrix/core/store/slo_views.sql``), so a stored run can be judged again under other limits.
"""

from infermatrix.core.slo.spec import MLPERF_PRESETS, Limit, SloSpec, parse_slo, slo_from_table

__all__ = ["MLPERF_PRESETS", "Limit", "SloSpec", "parse_slo", "slo_from_table"]
