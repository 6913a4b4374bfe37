"""Child process groups: start with the log captured to a file, stop the whole tree, never orphan it."""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil

__all__ = ["ChildProcess", "stop_all_children"]

_LIVE: set["ChildProcess"] = set()
_PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks Linux to SIGTERM the child if this process dies, even by SIGKILL.

    Prepared here, in the parent, so the forked child runs nothing but one libc call. The kernel
    ties the signal to the thread that forks; engines are started from the event-loop thread,
    which lives as long as the run.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_pdeathsig() -> None:
        # A parent started in the background (`cmd &`) has SIGINT ignored, and children inherit that;
        # the engine must obey our first, polite signal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)

    return set_pdeathsig


class ChildProcess:
    """A command run in its own process group, stdout+stderr appended to ``log_path``."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None, display: str | None = None):
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.display = display or " ".join(argv)  # redacted form, for logs and errors
        self.proc: subprocess.Popen[bytes] | None = None
        self._hurry = False  # kill_now() was called: stop() skips the grace periods

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
                preexec_fn=_parent_death_signal(),  # and it goes down with us, however we go down
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

    def exit_note(self) -> str:
        """How it ended, in words ("exited with code 3", "was killed by SIGKILL"), or "is running"."""
        rc = self.returncode()
        if rc is None:
            return "is running" if self.proc is not None else "was never started"
        if rc < 0:
            try:
                return f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"was killed by signal {-rc}"
        return f"exited with code {rc}"

    def kill_now(self) -> None:
        """SIGKILL the group and every descendant at once (a second Ctrl-C); a running stop() returns soon."""
        self._hurry = True
        if self.proc is None:
            return
        try:
            tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        _signal_tree(self.proc.pid, tree, signal.SIGKILL)

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
            if self._hurry and sig != signal.SIGKILL:
                continue
            _signal_tree(self.proc.pid, tree, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not any(_alive(p) for p in tree):
                    break
                if self._hurry and sig != signal.SIGKILL:
                    break
                time.sleep(0.05)
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


def _signal_tree(pgid: int, tree: list[psutil.Process], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in tree:  # descendants that left the group
        try:
            p.send_signal(sig)
        except psutil.Error:
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
