"""A user's task file: JSON Lines, one task a line — ``{"prompt": ..., "answer": ...}`` or ``{"prompt": ...,
"regex": ...}``, an optional ``"id"`` (GSM8K / MMLU-Pro style files turned into these two fields). Blank lines are
skipped. A mistake is one line naming ``file:line`` (``TaskFileError``): a line without an answer, a regex that
does not compile, both an answer and a regex, an empty file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from infermatrix.core.tasks.builtin import Task

__all__ = ["TaskFileError", "read_task_file"]


class TaskFileError(ValueError):
    """One line: ``file:line: what is wrong``."""


def _task(obj: Any, where: str, line_no: int, task_set: str) -> Task:
    if not isinstance(obj, dict):
        raise TaskFileError(f"{where}: a task is a JSON object with \"prompt\" and \"answer\" or \"regex\"")
    prompt, answer, regex = obj.get("prompt"), obj.get("answer"), obj.get("regex")
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskFileError(f"{where}: no \"prompt\" (a non-empty string)")
    if answer is None and regex is None:
        raise TaskFileError(f"{where}: no \"answer\" or \"regex\": the task cannot be judged")
    if answer is not None and regex is not None:
        raise TaskFileError(f"{where}: both \"answer\" and \"regex\": give one")
    if answer is not None:
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or not str(answer).strip():
            raise TaskFileError(f"{where}: \"answer\" must be a non-empty string or a number")
        answer = str(answer)
    if regex is not None:
        if not isinstance(regex, str):
            raise TaskFileError(f"{where}: \"regex\" must be a string")
        try:
            re.compile(regex)
        except re.error as exc:
            raise TaskFileError(f"{where}: \"regex\" does not compile: {exc}") from None
    tid = obj.get("id")
    return Task(str(tid) if tid is not None else f"line{line_no}", prompt, answer, regex, kind="file", task_set=task_set)


def read_task_file(path: str | Path) -> list[Task]:
    """Every task of the file, in order; ``TaskFileError`` (one line, ``file:line``) at the first mistake."""
    p = Path(path)
    try:
        lines = p.read_bytes().splitlines()
    except OSError as exc:
        raise TaskFileError(f"{p}: cannot read the task file ({exc.strerror or exc})") from None
    tasks: list[Task] = []
    ids: set[str] = set()
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise TaskFileError(f"{p}:{i}: not JSON ({exc})") from None
        task = _task(obj, f"{p}:{i}", i, p.name)
        if task.id in ids:
            raise TaskFileError(f"{p}:{i}: task id {task.id!r} appears twice (compare pairs tasks by id)")
        ids.add(task.id)
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{p}:1: no tasks (the file is empty)")
    return tasks
