"""The ``tasks`` workload (issue 31 item 2; docs/workloads.md): prompts with checkable answers sent WITHOUT
``ignore_eos``, so each completion ends where the model ends it; per task the output and reasoning tokens, the
answer read from the output and whether it is right (the runner judges each reply: core/tasks/judge.py).

Tasks come from the built-in generated set (multi-step arithmetic and string tasks made from ``matrix.seed``:
exact answers, nothing downloaded) or a user's JSON Lines file (``{"prompt", "answer"}`` or ``{"prompt",
"regex"}``). ``concurrency`` sessions pull the next task from one queue; with ``stop_when_ci_below`` the pass
stops handing out tasks once the 95 % interval (of the mean output tokens, or of the accuracy) is narrower than
asked (core/tasks/stats.py, ``StopRule``); the requests in flight then finish and count.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from infermatrix.plugin import (
    TASK_KINDS, ConfigError, MatrixConfig, Prompt, PromptBuilder, StopRule, Strict, Task, TaskFileError, TaskOutcome,
    Tokenizer, WorkloadRequest, hookimpl, make_tasks, mean_interval, parse_workload_options, read_task_file,
)  # fmt: skip

__all__ = ["TasksOptions", "TasksWorkload", "make_workload", "check_options", "WORKLOAD_OPT_IN"]

WORKLOAD_OPT_IN = True  # runs only when named: matrix.workload = "tasks" (core/workloads.py)


class TasksOptions(Strict):
    """The ``[workload]`` table of ``tasks`` (docs/workloads.md)."""

    file: str | None = Field(None, description="a JSON Lines task file ({prompt, answer} or {prompt, regex}); none: the built-in set")
    tasks: int | None = Field(None, ge=1, description="tasks to send at most; default: 100 built-in, or every task of the file")
    kinds: list[str] = Field(default_factory=lambda: list(TASK_KINDS), description="built-in task kinds, sent in turn")
    max_tokens: int = Field(2048, ge=1, description="max_tokens of every task: the cap on its natural length")
    concurrency: int = Field(8, ge=1, description="tasks in flight at once")
    stop_when_ci_below: float | None = Field(None, gt=0, description="stop once the 95 % interval is narrower than this "
                                             "(output_tokens: relative to the mean; accuracy: absolute)")  # fmt: skip
    stop_on: Literal["output_tokens", "accuracy"] = "output_tokens"
    min_tasks: int = Field(20, ge=2, description="judged tasks before the auto-stop may stop the pass")

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: list[str]) -> list[str]:
        bad = [k for k in v if k not in TASK_KINDS]
        if bad or not v:
            raise ValueError(f"unknown kind {bad[0]!r} (kinds: {', '.join(TASK_KINDS)})" if bad else "name at least one kind")
        return v


class _Pool:
    """The tasks, handed out one at a time, and what came back (the auto-stop's data)."""

    def __init__(self, tasks: list[Task], rule: StopRule | None) -> None:
        self.tasks, self.rule, self.next_index = tasks, rule, 0
        self.outcomes: list[TaskOutcome] = []
        self.stopped_by: str | None = None

    def take(self) -> Task | None:
        if self.stopped_by is None and self.rule is not None:
            ok = [o for o in self.outcomes if o.ok]
            if self.rule.met([o.output_tokens or 0 for o in ok], [o.correct for o in ok]):
                self.stopped_by = f"interval of {self.rule.on} below {self.rule.below:g}"
        if self.stopped_by is not None or self.next_index >= len(self.tasks):
            self.stopped_by = self.stopped_by or "all tasks sent"
            return None
        task, self.next_index = self.tasks[self.next_index], self.next_index + 1
        return task


class _Worker:
    """One of ``concurrency`` sessions: the next task of the pool after each reply."""

    def __init__(self, pool: _Pool, api: str, max_tokens: int) -> None:
        self.pool, self.api, self.max_tokens = pool, api, max_tokens

    def observe(self, outcome: TaskOutcome) -> None:
        self.pool.outcomes.append(outcome)

    async def next(self, reply: str | None, prompt_tokens: int | None) -> WorkloadRequest | None:
        task = self.pool.take()
        if task is None:
            return None
        req = WorkloadRequest(max_tokens=self.max_tokens, ignore_eos=False, task=task)  # natural length: never ignore_eos
        if self.api == "chat":
            req.messages = [{"role": "user", "content": task.prompt}]
        else:
            req.prompt = task.prompt
        return req


def _load(config: MatrixConfig, o: TasksOptions) -> list[Task]:
    if o.file is None:
        return make_tasks(config.seed, o.tasks or 100, tuple(o.kinds))
    try:
        tasks = read_task_file(o.file)
    except TaskFileError as exc:
        raise ConfigError(str(exc)) from None
    return tasks[: o.tasks] if o.tasks else tasks


class TasksWorkload:
    """``prompt`` as the built-in workload; ``sessions`` the workers sharing the task pool."""

    name = "tasks"
    block_tokens = None

    def __init__(self, config: MatrixConfig, tokenizer: Tokenizer, options: TasksOptions) -> None:
        self.config, self.options = config, options
        self.base = PromptBuilder(config.seed, config.prompt_mode, tokenizer)
        self.tasks = _load(config, options)
        rule = StopRule(options.stop_when_ci_below, options.stop_on, options.min_tasks) if options.stop_when_ci_below else None
        self.pool = _Pool(self.tasks, rule)
        self.concurrency = min(options.concurrency, len(self.tasks))

    async def prompt(self, context_tokens: int, key: str, *, distinct: bool | None = None) -> Prompt:
        return await self.base.prompt(context_tokens, key, distinct=distinct)

    async def sessions(self) -> list[_Worker]:
        self.pool = _Pool(self.tasks, self.pool.rule)  # a pass run again (resume) starts from the first task
        return [_Worker(self.pool, self.config.api, self.options.max_tokens) for _ in range(self.concurrency)]

    def describe(self) -> dict[str, object]:
        """The parameters as run and, after the pass, how it ended (``result``: the task_results view reads it)."""
        ok = [o for o in self.pool.outcomes if o.ok]
        m = mean_interval([float(o.output_tokens or 0) for o in ok])
        result = {"available": len(self.tasks), "sent": self.pool.next_index, "stopped_by": self.pool.stopped_by,
                  "output_tokens_lo": m[1] if m else None, "output_tokens_hi": m[2] if m else None}  # fmt: skip
        return {"workload": self.name, **self.options.model_dump(), "api": self.config.api, "natural_length": True, "result": result}


def check_options(config: MatrixConfig, options: dict) -> None:
    """The ``[workload]`` table checked when the config is (core/workloads.py); a task file is read now, so a
    mistake in it is one line naming ``file:line`` before the run exists."""
    o = parse_workload_options(options, TasksOptions, "tasks")
    if o.file is not None:
        _load(config, o)


@hookimpl
def make_workload(config: MatrixConfig, tokenizer: Tokenizer, options: dict) -> TasksWorkload:
    """The ``make_workload`` hook: tasks with checkable answers at their natural length (``[workload]`` parameters)."""
    return TasksWorkload(config, tokenizer, parse_workload_options(options, TasksOptions, "tasks"))
