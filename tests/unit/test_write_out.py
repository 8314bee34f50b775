"""validate writes a scratch server's files out to disk before the first epoch (write_out):
every regular file and directory under the scratch directory, passing over what is not data
(a server's socket, a fifo, links) without blocking on it."""

import os
import socket
import threading

from hpadvise.benchmarks.target import write_out


def test_files_and_directories_synced_and_nothing_else_opened(tmp_path, monkeypatch):
    data = tmp_path / "data" / "base"
    data.mkdir(parents=True)
    (data / "16384").write_bytes(b"x" * 8192)
    (tmp_path / "data" / "PG_VERSION").write_text("15\n")
    os.mkfifo(tmp_path / "fifo")  # opening it to read would wait for a writer
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / ".s.PGSQL.5432"))
    os.symlink("/etc/passwd", tmp_path / "link")
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    done = threading.Event()
    t = threading.Thread(target=lambda: (write_out(str(tmp_path)), done.set()), daemon=True)
    t.start()
    try:
        assert done.wait(10), "write_out blocked (on the fifo?)"
    finally:
        s.close()
    assert sorted(synced) == sorted(str(p) for p in (
        data / "16384", tmp_path / "data" / "PG_VERSION", data, tmp_path / "data", tmp_path))
