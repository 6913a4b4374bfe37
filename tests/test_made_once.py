"""tests/vllm_run_once.py's made_once: what the whole suite shares (one real vLLM run) is made once, whichever
caller comes first, and a make that failed is not taken for done."""

from __future__ import annotations

import threading
import time

import pytest
from vllm_run_once import made_once


def test_many_callers_one_make_and_everyone_sees_it(tmp_path):
    calls: list[int] = []
    started = threading.Barrier(4)

    def make(folder):
        calls.append(1)
        time.sleep(0.05)  # a make takes a while (a real one, a minute): without the lock the others would make too
        (folder / "made").write_text("yes")

    seen: list[str] = []

    def caller():
        started.wait()
        seen.append((made_once(tmp_path, "thing", make) / "made").read_text())

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and seen == ["yes"] * 4


def test_a_failed_make_is_tried_again_from_an_empty_folder(tmp_path):
    def broken(folder):
        (folder / "half").write_text("x")
        raise RuntimeError("engine did not start")

    with pytest.raises(RuntimeError):
        made_once(tmp_path, "thing", broken)
    folder = made_once(tmp_path, "thing", lambda f: (f / "whole").write_text("y"))
    assert sorted(p.name for p in folder.iterdir()) == ["whole"]
