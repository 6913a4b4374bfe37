"""Opening the database: clear one-line errors for locks, missing directories and bad files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from infermatrix.core.store import Store, StoreError, open_store

HOLDER = textwrap.dedent(
    """
    import sys, time
    from infermatrix.core.store import Store
    s = Store(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.read()  # hold the database until the test closes our stdin
    """
)


@pytest.fixture
def holder(db_path):
    """Another process with the database open for writing."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        pytest.fail(f"holder process did not start: {proc.stderr.read()}")
    yield proc
    proc.stdin.close()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("read_only", [False, True])
def test_locked_by_another_process(db_path, holder, read_only):
    with pytest.raises(StoreError) as err:
        Store(db_path, read_only=read_only)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(db_path) in msg and "in use by another process" in msg
    assert f"pid {holder.pid}" in msg


@pytest.mark.slow  # starts a process
def test_lock_released_when_holder_exits(db_path, holder):
    holder.stdin.close()
    holder.wait(timeout=20)
    with Store(db_path) as s:
        assert s.query("SELECT 1")[1] == [(1,)]


def test_missing_directory(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "x.duckdb"
    with pytest.raises(StoreError) as err:
        Store(path)
    assert str(path.parent) in str(err.value) and "does not exist" in str(err.value)
    assert not path.parent.exists()  # nothing was created


def test_parent_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        Store(f / "x.duckdb")


def test_path_is_a_directory(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)


def test_read_only_needs_existing_file(tmp_path):
    path = tmp_path / "absent.duckdb"
    with pytest.raises(StoreError, match="no database at"):
        Store(path, read_only=True)
    assert not path.exists()


def test_not_a_duckdb_file(tmp_path):
    path = tmp_path / "junk.duckdb"
    path.write_bytes(b"this is not a database" * 300)
    with pytest.raises(StoreError) as err:
        Store(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_plain_duckdb_file_is_not_a_store_when_read_only(tmp_path):
    import duckdb

    path = tmp_path / "other.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(StoreError, match="not an infermatrix database"):
        Store(path, read_only=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable"):
            Store(d / "x.duckdb")
    finally:
        d.chmod(0o700)


def test_open_store_default_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_store() as s:
        assert os.path.basename(s.path) == "infermatrix.duckdb"
    assert (tmp_path / "infermatrix.duckdb").exists()


def test_memory_store():
    with Store(":memory:") as s:
        run_id = s.create_run({"engine": "x"})
        assert s.get_run(run_id)["engine"] == "x"
