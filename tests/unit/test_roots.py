"""A server's own root read as the server sees it: absolute links inside a root lead to the
root's files, never the host's; its users are its own passwd's; a journaled root is found
again by its identity, and its absence is said in one line."""

import os

import pytest

from hpadvise.facts.procs import ProcTable
from hpadvise.facts.roots import ProcRoot, RootGone, RootView, reach, resolve_in, users, view
from hpadvise.facts.sysroot import SysRoot


@pytest.fixture
def root(tmp_path):
    """A root laid out as Debian lays out MySQL's option files and /var/run."""
    r = tmp_path / "root"
    (r / "etc/mysql").mkdir(parents=True)
    (r / "etc/alternatives").mkdir()
    (r / "run/mysqld").mkdir(parents=True)
    (r / "var").mkdir()
    (r / "etc/mysql/mysql.cnf").write_text("[mysqld]\nlarge_pages = ON\n")
    # absolute links, as update-alternatives and base-files make them
    os.symlink("/etc/alternatives/my.cnf", r / "etc/mysql/my.cnf")
    os.symlink("/etc/mysql/mysql.cnf", r / "etc/alternatives/my.cnf")
    os.symlink("/run", r / "var/run")
    (r / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\npostgres:x:100:102::/:/bin/sh\n")
    return r


def _proc_root(path) -> ProcRoot:
    st = os.stat(path)
    # a PID no process has: base() must find the root by its identity, at its host path
    return ProcRoot(2 ** 22 + 7, st.st_dev, st.st_ino, str(path), True, True)


def test_absolute_links_resolve_inside_the_root(root):
    got = resolve_in(str(root), "/etc/mysql/my.cnf")
    assert got == str(root / "etc/mysql/mysql.cnf")
    assert resolve_in(str(root), "/var/run/mysqld") == str(root / "run/mysqld")
    # '..' stops at the root, as it does for the process inside
    assert resolve_in(str(root), "/../../etc/passwd") == str(root / "etc/passwd")
    # a path that does not exist yet keeps its tail (a file apply will create)
    assert resolve_in(str(root), "/var/run/mysqld/new.cnf") == str(root / "run/mysqld/new.cnf")


def test_a_link_loop_is_an_error_not_a_hang(root):
    os.symlink("/loop2", root / "loop1")
    os.symlink("/loop1", root / "loop2")
    with pytest.raises(OSError):
        resolve_in(str(root), "/loop1/x")


def test_the_view_reads_the_roots_files_and_names_the_root_in_notes(root):
    host = SysRoot("/")
    v = RootView(host, _proc_root(root))
    assert "large_pages = ON" in v.read("/etc/mysql/my.cnf")
    assert v.live  # the running server's files, not a snapshot
    assert v.read("/etc/mysql/conf.d/x.cnf") is None
    assert any("in the root" in str(n) and str(root) in str(n) for n in host.notes)


def test_users_are_the_roots_own(root):
    v = RootView(SysRoot("/"), _proc_root(root))
    assert users(v)[100] == "postgres"
    assert ProcTable(SysRoot("/")).user(100, v) == "postgres"


def test_a_journaled_root_is_reached_again_and_its_absence_said(root, tmp_path):
    spec = _proc_root(root).to_spec()
    assert reach(spec, "/etc/mysql/my.cnf") == str(root / "etc/mysql/mysql.cnf")
    assert reach(None, "/etc/mysql/my.cnf") == "/etc/mysql/my.cnf"  # the host's own
    gone = {**spec, "host_path": str(tmp_path / "elsewhere")}
    with pytest.raises(RootGone, match="is gone"):
        reach(gone, "/etc/mysql/my.cnf")


def test_a_process_sharing_our_root_is_read_through_the_host(tmp_path):
    sr = SysRoot("/")
    assert view(sr, os.getpid()) is sr
    assert view(SysRoot(tmp_path), 1).root == tmp_path  # a snapshot: no roots to enter


def test_a_root_this_user_cannot_enter_is_not_read_as_the_hosts(tmp_path):
    """A HiddenView refuses every read with a note, so that the host's file of the same name is
    never taken for the server's own."""
    from hpadvise.facts.roots import HiddenView
    host = SysRoot("/")
    v = HiddenView(host, 4242)
    assert v.read("/etc/passwd") is None and not v.exists("/etc/passwd")
    assert v.listdir("/etc") == []
    assert any("only root can read" in n.reason for n in host.notes)


def test_a_directory_made_in_a_root_is_found_there_again_by_its_roots_identity(root):
    """apply journals a directory it makes inside a server's root with the root and the path
    there: rollback reaches it through whatever holds the root then (here the root's host
    path: no process of the journaled PID is left), never through a dead /proc/PID/root."""
    from hpadvise.act.apply import inside_root
    from hpadvise.changes.file_actions import Directory
    spec = _proc_root(root).to_spec()
    assert inside_root(spec, f"{root}/etc/mysql/conf.d") == "/etc/mysql/conf.d"
    assert inside_root(spec, "/elsewhere/x") is None
    d = Directory(f"/proc/{spec['pid']}/root/etc/mysql/conf.d", spec, "/etc/mysql/conf.d")
    again = Directory.from_spec(d.spec())  # as rollback rebuilds it from the journal
    assert again.get() is None
    again.set("present")
    assert (root / "etc/mysql/conf.d").is_dir() and again.get() == "present"
    again.set(None)
    assert not (root / "etc/mysql/conf.d").exists()
    gone = dict(spec, ino=spec["ino"] + 1)  # a root nothing holds any more: said, not guessed
    with pytest.raises(Exception, match="is gone"):
        Directory("/x", gone, "/etc/x").get()
