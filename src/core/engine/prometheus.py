"""Reading Prometheus text pages: a sample's value summed over label sets, an info metric's labels.

Vendor-neutral: engines name their own metrics (``EngineTraits.metrics``); nothing here knows a name.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["metric_value", "scan_values", "metric_samples", "info_labels", "sample_name"]


def metric_value(text: str, name: str) -> float | None:
    """Sum of a metric's samples across label sets (``name`` or ``name_total``), or ``None`` if absent."""
    total, seen = 0.0, False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name or sample.name == f"{name}_total":
                    total += sample.value
                    seen = True
    except (ValueError, TypeError):
        return None
    return total if seen else None


def sample_name(line: str) -> str:
    end = len(line)
    for stop in ("{", " ", "\t"):
        i = line.find(stop)
        if 0 <= i < end:
            end = i
    return line[:end]


def scan_values(page: str, names: Iterable[str]) -> dict[str, float | None]:
    """``metric_value`` for several names at once, fast on large pages.

    A real engine's ``/metrics`` page can be ~50 KB; a full parse of it takes tens of ms inside the
    event loop. Only the sample lines whose name is wanted (or ``wanted_total``) are kept and parsed.
    """
    wanted = [n for n in names if n]
    if not wanted:
        return {}
    keep = set(wanted) | {f"{n}_total" for n in wanted}
    prefixes = tuple(wanted)
    lines = [ln for ln in page.splitlines() if ln.startswith(prefixes) and sample_name(ln) in keep]
    text = "\n".join(lines) + "\n"
    return {n: metric_value(text, n) for n in wanted}


def metric_samples(page: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of ``name`` (or ``name_total``) with its labels, for an engine whose values must
    be combined otherwise than summed (one gauge per parallel rank, a ratio to average)."""
    keep = {name, f"{name}_total"}
    lines = [ln for ln in page.splitlines() if ln.startswith(name) and sample_name(ln) in keep]
    out: list[tuple[dict[str, str], float]] = []
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            out += [(dict(s.labels), s.value) for s in family.samples if s.name in keep]
    except (ValueError, TypeError):
        return []
    return out


def info_labels(text: str | None, family: str) -> dict[str, str]:
    """The labels of the first sample of an info-style metric family (``family`` or ``family_info``)."""
    if not text:
        return {}
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name in (family, f"{family}_info") or fam.name.removesuffix("_info") == family.removesuffix("_info"):
                for sample in fam.samples:
                    return dict(sample.labels)
    except (ValueError, TypeError):
        return {}
    return {}

