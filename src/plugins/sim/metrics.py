"""``/metrics``: Prometheus text with vLLM's metric names and labels (or the profile's renames), rendered by prometheus_client."""

from __future__ import annotations

from typing import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from infermatrix.plugins.sim.profile import CAPACITY_GAUGES
from infermatrix.plugins.sim.scheduler import Scheduler

__all__ = ["render_metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABELS = ["model_name", "engine"]  # vLLM v1 labels every engine metric with both


class _Collector:
    def __init__(self, sched: Scheduler):
        self.sched = sched

    def describe(self) -> list[Metric]:
        return []  # collect() is cheap and has no fixed set of samples worth declaring

    def collect(self) -> Iterator[Metric]:
        s, p = self.sched, self.sched.p
        lv = [p.model, "0"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=_LABELS)
            g.add_metric(lv, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            c.add_metric(lv, value)
            return c

        c = s.counters
        usage = s.kv_usage()
        f = p.metric_family
        yield gauge(f("running"), "Number of requests in model execution batches.", s.n_admitted)
        yield gauge(f("waiting"), "Number of requests waiting to be processed.", len(s.waiting))
        yield gauge(f("kv_usage"), "KV-cache usage. 1 means 100 percent usage.", usage)
        yield gauge(f("kv_usage_legacy"), "GPU KV-cache usage (pre-v1 name).", usage)
        yield counter(f("prompt_tokens"), "Number of prefill tokens processed.", c["prompt_tokens"])
        yield counter(f("generated_tokens"), "Number of generation tokens processed.", c["generation_tokens"])
        yield counter(f("prefix_cache_queries"), "Prefix cache queries, in tokens.", c["cache_queries"])
        yield counter(f("prefix_cache_hits"), "Prefix cache hits, in tokens.", c["cache_hits"])
        if p.spec_tokens:  # as vLLM: the spec_decode families exist only with speculative decoding on
            yield counter(f("spec_drafts"), "Number of spec decoding drafts.", c["spec_drafts"])
            yield counter(f("spec_draft_tokens"), "Number of draft tokens.", c["spec_draft_tokens"])
            yield counter(f("spec_accepted_tokens"), "Number of accepted tokens.", c["spec_accepted_tokens"])
            pos = CounterMetricFamily(f("spec_accepted_per_pos"), "Accepted tokens per draft position.", labels=[*_LABELS, "position"])
            for i, v in enumerate(s.spec_accepted_per_pos):
                pos.add_metric([*lv, str(i)], v)
            yield pos
        yield counter(f("preemptions"), "Cumulative number of preemption from the engine.", c["preemptions"])
        done = CounterMetricFamily(f("request_success"), "Count of successfully processed requests.",
                                   labels=[*_LABELS, "finished_reason"])  # fmt: skip
        for reason in ("stop", "length"):
            done.add_metric([*lv, reason], c["finished_" + reason])
        done.add_metric([*lv, "abort"], c["aborted"])
        yield done
        info = GaugeMetricFamily(f("cache_config"), "Information of the LLMEngine CacheConfig",
                                 labels=["block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                                         "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override"])  # fmt: skip
        info.add_metric([str(p.block_size), "auto", str(p.prefix_cache_tokens > 0), "0.9", "0", str(p.num_gpu_blocks), "None"], 1.0)
        yield info
        # Capacity as plain gauges, for engines that publish it so (profile capacity_gauges; none by default).
        values = {"kv_tokens": p.kv_tokens, "max_seqs": p.max_num_seqs}
        for role, name in p.capacity_gauges.items():
            yield gauge(name, CAPACITY_GAUGES[role], values[role])


def render_metrics(sched: Scheduler) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(sched))
    return generate_latest(registry)
