"""A fact that could not be read is a value of its own: it never turns into text, a path or a
number, so it cannot end up as "None" or "?" in a sentence, a command or a directory name; a
postmaster's data directory is found the way PostgreSQL decides it (the configuration file's
data_directory when started with -c config_file and no -D), and an owner is named by the
process's own user namespace."""

from __future__ import annotations

import os

import pytest

from hpadvise.facts.procs import Proc
from hpadvise.facts.sysroot import SysRoot
from hpadvise.facts.userns import inside_uid
from hpadvise.kit.unknown import Unknown, UnknownFact, known
from hpadvise.plugins.postgres.whereis import locate

U = Unknown("the data directory of postmaster 7", "no -D", "pass --dsn")


@pytest.mark.parametrize("use", [
    lambda u: f"{u}/postgresql.auto.conf",
    lambda u: "-D " + u,
    lambda u: u + "/x",
    lambda u: str(u),
    lambda u: "%s" % (u,),
    lambda u: "{}".format(u),
    lambda u: os.path.join(u, "x"),
    lambda u: os.fspath(u),
    lambda u: int(u),
    lambda u: list(u),
])
def test_an_unknown_refuses_to_become_a_value(use):
    with pytest.raises(UnknownFact):
        use(U)


def test_an_unknown_is_missing_and_says_why_and_what_supplies_it():
    assert not U and not known(U) and not known(None) and known("") and known(0)
    assert (U or "fallback") == "fallback"
    assert U.line() == "the data directory of postmaster 7 is unknown (no -D); pass --dsn"
    assert U.as_json() == {"unknown": "no -D", "supply": "pass --dsn"}
    assert isinstance(UnknownFact("x"), TypeError)


def _host(tmp_path, cmd_conf: str, cwd: str | None, uid_map: str | None = None) -> SysRoot:
    """A captured host: postmaster 42 with a configuration file, its cwd link, its uid_map."""
    p = tmp_path / "proc/42"
    p.mkdir(parents=True)
    (p / "status").write_text("Name:\tpostgres\nUid:\t100999\t100999\t100999\t100999\n")
    if cwd:
        os.symlink(cwd, p / "cwd")
    if uid_map is not None:
        (p / "uid_map").write_text(uid_map)
    conf = tmp_path / "etc/postgresql/17/hold"
    (conf / "conf.d").mkdir(parents=True)
    (conf / "postgresql.conf").write_text(cmd_conf)
    (conf / "conf.d/memory.conf").write_text("shared_buffers = '1GB'\n")
    return SysRoot(tmp_path)


CONF = "/etc/postgresql/17/hold/postgresql.conf"


def test_config_file_without_D_takes_that_files_data_directory(tmp_path):
    sr = _host(tmp_path, "data_directory = '/var/lib/postgresql/17/hold'\n"
                         "include_dir = 'conf.d'\n", None)
    d, conf, how = locate(sr, sr, Proc(sr, 42), {"config_file": CONF}, None, {})
    assert (d, conf) == ("/var/lib/postgresql/17/hold", CONF)
    assert how == f"data_directory in {CONF}:1"


def test_the_command_lines_data_directory_outranks_the_file(tmp_path):
    sr = _host(tmp_path, "data_directory = '/var/lib/postgresql/17/hold'\n", None)
    d, _, how = locate(sr, sr, Proc(sr, 42), {"config_file": CONF,
                                              "data_directory": "/srv/pg"}, None, {})
    assert (d, how) == ("/srv/pg", "-c data_directory")


def test_D_names_the_configuration_directory_whose_file_may_point_elsewhere(tmp_path):
    sr = _host(tmp_path, "data_directory = '/var/lib/postgresql/17/hold'\n", None)
    d, conf, _ = locate(sr, sr, Proc(sr, 42), {}, "/etc/postgresql/17/hold", None)
    assert (d, conf) == ("/var/lib/postgresql/17/hold", CONF)
    # PGDATA when there is no -D (the official image's entrypoint)
    d, _, how = locate(sr, sr, Proc(sr, 42), {}, None, {"PGDATA": "/etc/postgresql/17/hold"})
    assert d == "/var/lib/postgresql/17/hold" and how.startswith("data_directory in")


def test_its_working_directory_when_nothing_else_says(tmp_path):
    # a relative -D: relative to a directory the postmaster has left; the kernel's cwd says
    sr = _host(tmp_path, "", "/var/lib/postgresql/17/hold")
    d, _, how = locate(sr, sr, Proc(sr, 42), {}, "hold", None)
    assert (d, how) == ("/var/lib/postgresql/17/hold", "its working directory")


def test_nothing_readable_is_an_unknown_with_what_supplies_it(tmp_path):
    sr = _host(tmp_path, "", None)
    d, _, _ = locate(sr, sr, Proc(sr, 42), {}, None, None)
    # a snapshot cannot be asked (--dsn, root): what supplies it is a snapshot that kept it
    assert not known(d) and "postmaster 42" in d.what and \
        "snapshot --with-environ" in d.supply and "--dsn" not in d.supply
    with pytest.raises(UnknownFact):
        f"{d}/postgresql.auto.conf"
    # an unreadable configuration file: its reason, not a guess
    d, _, _ = locate(sr, sr, Proc(sr, 42), {"config_file": "/etc/none.conf"}, None, {})
    assert not known(d) and "/etc/none.conf" in d.why


def test_an_owner_is_named_by_its_user_namespace(tmp_path):
    sr = _host(tmp_path, "", None, "         0     100000      65536\n")
    assert inside_uid(sr, 42, 100999) == 999
    assert inside_uid(sr, 42, 5) == 5  # outside the map: as it is
    sr = _host(tmp_path / "b", "", None, "         0          0 4294967295\n")
    assert inside_uid(sr, 42, 100999) == 100999  # the initial namespace's identity map
    assert inside_uid(SysRoot(tmp_path / "none"), 42, 7) == 7  # unreadable map


def test_a_postmaster_whose_data_directory_nothing_says_is_planned_for_in_one_line(
        hosts, tmp_path):
    """A postmaster started with -c config_file whose file cannot be read and whose working
    directory is not there: check says in one line what is unknown and what supplies it, and
    plans nothing for it (apply leaves an instance with errors out, with that line)."""
    import shutil

    from hpadvise.api.engines import Targets
    from hpadvise.planning.pipeline import inspect
    tree = tmp_path / "tree"
    shutil.copytree(hosts / "no-pools", tree, symlinks=True)
    p = tree / "proc/4242"
    p.mkdir()
    (p / "comm").write_text("postgres\n")
    (p / "cmdline").write_text("/usr/lib/postgresql/17/bin/postgres\0-c\0"
                               "config_file=/etc/postgresql/17/hold/postgresql.conf\0")
    (p / "status").write_text("Name:\tpostgres\nPPid:\t1\nUid:\t100\t100\t100\t100\n")
    report = inspect(SysRoot(tree), "oltp", Targets(), ["postgres"])
    i = next(i for i in report.instances if i.pid == 4242)
    assert i.id == "postgres:pid4242" and i.label == "postmaster 4242"
    dd = i.settings["data_directory"]
    assert "unknown" in dd and "snapshot --with-environ" in dd["supply"], dd
    assert len(i.errors) == 1 and "the data directory of postmaster 4242 is unknown" in \
        i.errors[0] and "snapshot --with-environ" in i.errors[0], i.errors
    from hpadvise.outputs.render import to_json
    assert "None" not in to_json(report) and "/?" not in to_json(report)
    assert report.placements[i.id].status == "unsized"  # nothing planned for it
