"""The run's telemetry: the engine's series and the GPUs', each read on a thread of its own (``Ticker``), every
row tagged with what the run was doing when it was read (its phase, the cell or probe), drained by the run
between steps to be saved (docs/telemetry.md).

    tel = Telemetry(cfg.telemetry, metrics=(url, headers, names), phase_of=lambda: phase.now)
    tel.start()                       # threads start; what cannot be read is said once in tel.take_notes()
    tel.unit = ("decode 1K×8", 1024, 8)
    engine_rows, gpu_rows = tel.drain()
    tel.stop()
"""

from __future__ import annotations

from typing import Any, Callable

from infermatrix.core.engine.traits import MetricNames
from infermatrix.core.telemetry.engine_series import EngineSeries
from infermatrix.core.telemetry.nvml import NvmlReader, open_nvml
from infermatrix.core.telemetry.ticker import RowBuffer, Ticker

__all__ = ["Telemetry", "Unit"]

Unit = tuple["str | None", "int | None", "int | None"]  # (label, context tokens, concurrency) of the step running


class _Tagged(RowBuffer):
    """A reader whose rows are tagged ``(phase, unit label, context tokens, concurrency)`` at read time."""

    def __init__(self, reader: EngineSeries | NvmlReader, tag: Callable[[], tuple[Any, ...]]):
        super().__init__()
        self.reader, self.tag = reader, tag

    def read(self) -> None:
        tag = self.tag()
        self.reader.read()
        self.keep([row[:2] + tag + row[2:] for row in self.reader.drain()])

    take = RowBuffer.drain


class Telemetry:
    """Samples the engine's metrics every ``engine_interval_s`` and every GPU every ``gpu_interval_s`` (0: off)."""

    def __init__(self, engine_interval_s: float, gpu_interval_s: float, metrics: tuple[str, dict[str, str], MetricNames] | None,
                 phase_of: Callable[[], str]):  # fmt: skip
        self.engine_interval_s, self.gpu_interval_s = engine_interval_s, gpu_interval_s
        self.metrics, self.phase_of = metrics, phase_of
        self.unit: Unit = (None, None, None)
        self.engine: _Tagged | None = None
        self.gpu: _Tagged | None = None
        self.tickers: dict[str, Ticker] = {}
        self.notes: list[str] = []
        self._said: dict[str, int] = {}

    @property
    def nvml(self) -> bool:
        """Whether NVML reads the GPUs (then the nvidia-smi sampler is not needed)."""
        return self.gpu is not None

    def _tag(self) -> tuple[Any, ...]:
        return (self.phase_of(), *self.unit)

    def start(self) -> None:
        if self.engine_interval_s > 0 and self.metrics is not None:
            url, headers, names = self.metrics
            self.engine = _Tagged(EngineSeries(url, headers, names), self._tag)
            self.tickers["engine"] = Ticker("engine-metrics", self.engine_interval_s, self.engine.read)
        if self.gpu_interval_s > 0:
            reader, why = open_nvml()
            if reader is not None:
                self.gpu = _Tagged(reader, self._tag)
                self.tickers["gpu"] = Ticker("nvml", self.gpu_interval_s, self.gpu.read)
            elif why:
                self.notes.append(f"GPU telemetry: {why}; no energy figures (the nvidia-smi sampler is used where it runs)")
        for ticker in self.tickers.values():
            ticker.start()

    def drain(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The rows read since the last drain: engine ``(t, t_mono, phase, unit, ctx, n, metric, labels, value)``,
        GPU ``(t, t_mono, phase, unit, ctx, n, gpu, *GPU_SERIES_FIELDS)``."""
        out: list[list[tuple[Any, ...]]] = []
        for tagged in (self.engine, self.gpu):
            out.append(tagged.take() if tagged is not None else [])
        return out[0], out[1]

    def take_notes(self) -> list[str]:
        """What could not be read, each said once (a metrics page that began failing mid-run, NVML refused)."""
        for name, tagged in (("engine metrics", self.engine), ("GPU telemetry", self.gpu)):
            reader = tagged.reader if tagged is not None else None
            if reader is not None and reader.failures and not self._said.get(name):
                self._said[name] = reader.failures
                where = f" at {reader.url}" if isinstance(reader, EngineSeries) else ""
                self.notes.append(f"{name}{where}: a read failed ({reader.last_error}); its time series has gaps, the run goes on")
        notes, self.notes = self.notes, []
        return notes

    def costs(self) -> list[dict[str, Any]]:
        """Per sampler: reads, failed reads, the thread's CPU seconds and the reads' wall seconds."""
        out = []
        for name, ticker in self.tickers.items():
            tagged = self.engine if name == "engine" else self.gpu
            failures = tagged.reader.failures if tagged is not None else 0
            out.append({"source": name, "interval_s": ticker.interval_s, "reads": ticker.reads, "failures": failures,
                        "cpu_s": ticker.cpu_s, "wall_s": ticker.wall_s})  # fmt: skip
        return out

    def stop(self) -> None:
        """Stop the threads, then one last read of each (so the last window has a read after its end, which its
        energy and its engine rate are cut against)."""
        for ticker in self.tickers.values():
            ticker.stop()
        for tagged in (self.engine, self.gpu):
            if tagged is not None:
                tagged.read()
        for tagged in (self.engine, self.gpu):
            if tagged is not None:
                tagged.reader.close()
