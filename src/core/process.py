"""Child process groups: start with the log captured to a file, stop the whole tree, never orphan it."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

__all__ = ["ChildProcess", "stop_all_children"]

_LIVE: set["ChildProcess"] = set()


class ChildProcess:
    """A command run in its own process group, stdout+stderr appended to ``log_path``."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None, display: str | None = None):
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.display = display or " ".join(argv)  # redacted form, for logs and errors
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            log.write(f"--- infermatrix: starting: {self.display}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,  # own process group: one signal reaches the whole tree
            )
        finally:
            log.close()
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to the group and every descendant still alive."""
        _LIVE.discard(self)
        if self.proc is None:
            return
        try:
            tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for sig, wait in ((signal.SIGINT, grace_s * 0.6), (signal.SIGTERM, grace_s * 0.4), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None and not any(_alive(p) for p in tree):
                break
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            for p in tree:  # descendants that left the group
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not any(_alive(p) for p in tree):
                    break
                time.sleep(0.05)
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_all_children() -> None:
    """Stop every child still running (called at exit and on fatal signals)."""
    for child in list(_LIVE):
        child.stop(grace_s=3.0)


atexit.register(stop_all_children)
