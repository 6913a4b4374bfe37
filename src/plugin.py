"""The public plugin API: everything an infermatrix plugin imports comes from here.

    from infermatrix.plugin import AttachEngine, EngineConfig, EngineTraits, MetricNames, hookimpl

    class ToyConfig(EngineConfig):
        kind: Literal["toy"] = "toy"
        base_url: str

    class ToyEngine(AttachEngine):
        traits = EngineTraits(metrics=MetricNames(running="toy:running", waiting="toy:waiting"))

    @hookimpl
    def register_engines(register):
        register(ToyConfig, ToyEngine)

The hooks and the engine contract are described in docs/plugins.md; a complete plugin package in
docs/writing-a-plugin.md. Names not listed in ``__all__`` are not part of the API.
"""

from __future__ import annotations

from infermatrix.core.config import ConfigError, EngineConfig, LoopConfig, MatrixConfig, Strict
from infermatrix.core.engine.contract import AttachEngine, Engine, EngineError, LaunchedEngine, connect_host
from infermatrix.core.engine.detect import ProbeAnswer, Recognition, ServerProbe
from infermatrix.core.engine.hardware import detect_hardware
from infermatrix.core.hookspecs import hookimpl
from infermatrix.core.engine.argv import expand_path, model_flags
from infermatrix.core.engine.stale import send_again_if_stale
from infermatrix.core.engine.prometheus import info_labels, metric_samples, metric_value, scan_values
from infermatrix.core.redact import redact_argv
from infermatrix.core.engine.traits import (
    IGNORE_EOS_FIELDS,
    PER_CHUNK_USAGE_FIELDS,
    EngineTraits,
    Gauges,
    HttpCall,
    MetricNames,
    TokenizeAPI,
)
from infermatrix.core.types import Capacity, EngineInfo, LoopFinding, Prompt, Session, SessionWorkload, Tokenizer, Workload, WorkloadRequest
from infermatrix.core.prompt_builder import PROSE_WORDS, PromptBuilder, prompt_tolerance
from infermatrix.core.workload_options import TokenLengths, check_lengths, draw_length, parse_workload_options
from infermatrix.core.tasks.builtin import KINDS as TASK_KINDS, Task, make_tasks, solve as solve_task
from infermatrix.core.tasks.judge import judge as judge_task
from infermatrix.core.tasks.stats import StopRule, mean_interval
from infermatrix.core.tasks.taskfile import TaskFileError, read_task_file
from infermatrix.core.types import TaskOutcome

__all__ = [
    "hookimpl",
    # engines
    "Engine",
    "AttachEngine",
    "LaunchedEngine",
    "EngineError",
    "EngineConfig",
    "ConfigError",
    "Strict",
    "connect_host",
    "send_again_if_stale",
    "redact_argv",
    "model_flags",
    "expand_path",
    "detect_hardware",
    # what an engine declares
    "EngineTraits",
    "MetricNames",
    "Gauges",
    "TokenizeAPI",
    "HttpCall",
    "PER_CHUNK_USAGE_FIELDS",
    "IGNORE_EOS_FIELDS",
    # how an engine recognises its server (engine.kind = "auto")
    "ServerProbe",
    "ProbeAnswer",
    "Recognition",
    # what hooks take and return
    "Capacity",
    "EngineInfo",
    "Tokenizer",
    "Workload",
    "WorkloadRequest",
    "Session",
    "SessionWorkload",
    "Prompt",
    "LoopFinding",
    "LoopConfig",
    "MatrixConfig",
    # building a workload (the built-in ones use these exactly so)
    "PromptBuilder",
    "PROSE_WORDS",
    "prompt_tolerance",
    "TokenLengths",
    "check_lengths",
    "draw_length",
    "parse_workload_options",
    # tasks with checkable answers (the built-in tasks workload; the sim answers the built-in set with solve_task)
    "Task",
    "TaskOutcome",
    "TASK_KINDS",
    "make_tasks",
    "solve_task",
    "judge_task",
    "read_task_file",
    "TaskFileError",
    "StopRule",
    "mean_interval",
    # Prometheus text helpers
    "metric_value",
    "scan_values",
    "metric_samples",
    "info_labels",
]
