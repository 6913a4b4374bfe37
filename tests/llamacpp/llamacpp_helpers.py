"""Helpers of the real-llama.cpp tests (a module name of its own, so imports never pick another conftest)."""

from __future__ import annotations

import re
from pathlib import Path

from imxtest import engine_cli, processes_mentioning

ROOT = Path(__file__).parents[2]
SERVER_VAR = "INFERMATRIX_LLAMA_SERVER"
GGUF_VAR = "INFERMATRIX_TINY_GGUF"
KEY_VAR = "IMX_LLAMA_TEST_KEY"
TINY_CONFIG = ROOT / "configs" / "llamacpp-cpu-tiny.toml"
HOW = "scripts/setup-engine.sh llama-cpp builds it and prints the variables; .ci/run sets them"


# The real command line (a timeout for an engine's launch) and the process check, shared with every test folder.
cli = engine_cli
processes_using = processes_mentioning


def launch_args(server: str, gguf: Path, *extra: str) -> list[str]:
    return ["--set", f"engine.executable={server}", "--set", f"engine.model_source={gguf}", *extra]


# llama-server's per-task log lines, on its own clock (minutes.seconds.ms.µs since it started): a task's slot taken
# (``launch_slot_``), its prompt's evaluation (``print_timing``: "prompt eval time = X ms / N tokens", N the prompt tokens it
# computed, those it reused from a slot's cache left out; printed when the prompt is done, or at the end of a task that
# generates: never for one cancelled), its slot freed (``release``, with the tokens the slot then holds). At a task's end
# the server does ``print_timings(); send_final_response(); release()`` (server-context.cpp): its last ``print_timing``
# line is logged before its final response is posted, its ``release`` after — a client may read the response first.
SLOT_LINE = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) . slot +(launch_slot_|release|print_timing): id +\d+ \| task (\d+) \|(.*)$")
# At verbosity 4 (``-lv 4``) the HTTP handler of a streamed request logs ``server_strea: conv_id=…`` as it takes the
# request, before it posts the task (measured 1–6 ms before the slot is taken); no task id: a task's is the last such
# line before its ``launch_slot_``, which holds where requests come one at a time.
RECEIPT_LINE = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) . srv +server_strea: ")
N_TOKENS = re.compile(r"n_tokens = (\d+)")
PROMPT_EVAL = re.compile(r"prompt eval time = +([\d.]+) ms / +(\d+) tokens")


def _stamp(mm: str, ss: str, ms: str, us: str) -> float:
    return int(mm) * 60 + int(ss) + int(ms) / 1e3 + int(us) / 1e6


def server_tasks(log: str) -> dict[int, dict]:
    """task -> {start, done, end, n_tokens, prompt_ms, prompt_tokens, received} (seconds on the server's clock) from its
    log lines: ``done`` its last ``print_timing`` line (before its final response is sent), ``end`` its ``release``
    (after), ``received`` the last request taken before its slot (only in a log at ``-lv 4``: RECEIPT_LINE)."""
    tasks: dict[int, dict] = {}
    received = None
    for line in log.splitlines():
        if r := RECEIPT_LINE.match(line):
            received = _stamp(*r.groups())
            continue
        m = SLOT_LINE.match(line)
        if not m:
            continue
        mm, ss, ms, us, what, task, rest = m.groups()
        t = _stamp(mm, ss, ms, us)
        entry = tasks.setdefault(int(task), {})
        if what == "launch_slot_":
            entry["start"] = t
            if received is not None:
                entry["received"] = received
        elif what == "release":
            entry["end"] = t
            if n := N_TOKENS.search(rest):
                entry["n_tokens"] = int(n.group(1))
        else:
            entry["done"] = t
            if p := PROMPT_EVAL.search(rest):
                entry["prompt_ms"], entry["prompt_tokens"] = float(p.group(1)), int(p.group(2))
    return tasks


def server_log(db: Path, run_id: str) -> str:
    """The llama-server log a run kept beside its database (``<db>.runs/<run>/llamacpp.log``)."""
    return (db.with_name(db.stem + ".runs") / run_id / "llamacpp.log").read_text(errors="replace")
