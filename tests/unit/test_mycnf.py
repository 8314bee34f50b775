"""MySQL/MariaDB option files, sizes and the page arithmetic of the plugin (no server)."""

import pytest

from hpadvise.plugins import mysql as my
from hpadvise.plugins.mysql import actions as myactions
from hpadvise.plugins.mysql import conf as myconf
from hpadvise.plugins.mysql import discovery as mydisc
from hpadvise.plugins.mysql import sizing as mysizing
from hpadvise.plugins.mysql import versions
from hpadvise.facts.sysroot import SysRoot

GROUPS = myconf.server_groups("mariadb", (10, 11, 19))


def _tree(tmp_path, files: dict[str, str]) -> SysRoot:
    for path, text in files.items():
        p = tmp_path / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return SysRoot(tmp_path)


def test_groups_includes_and_later_wins(tmp_path):
    sr = _tree(tmp_path, {
        "/etc/mysql/my.cnf": "[client]\nkey_buffer_size=1M\n[mysqld]\n"
                             "innodb-buffer-pool-size = 2G  # comment\n"
                             "!includedir /etc/mysql/conf.d/\n"
                             "[mysqld-10.11]\nloose-aria-pagecache-buffer-size='64M'\n"
                             "!include /etc/mysql/extra.cnf\n",
        "/etc/mysql/conf.d/50-server.cnf": "[mariadbd]\ninnodb_buffer_pool_size=4G\nskip-large-pages\n",
        "/etc/mysql/conf.d/README": "[mysqld]\nkey_buffer_size=9M\n",
        "/etc/mysql/extra.cnf": "[server]\ninnodb_log_buffer_size = 32M\n[mysqld-8.0]\nkey_buffer_size=7M\n",
    })
    of = myconf.OptionFiles()
    myconf.read_option_file(sr, "/etc/mysql/my.cnf", GROUPS, of)
    s = {k: v for k, (v, _) in of.settings.items()}
    assert s["innodb_buffer_pool_size"] == "4G"       # the drop-in comes later
    assert s["large_pages"] == "OFF"                  # skip- prefix
    assert s["aria_pagecache_buffer_size"] == "64M"   # loose- prefix, quotes, version group
    assert s["innodb_log_buffer_size"] == "32M"
    assert "key_buffer_size" not in s                 # [client], [mysqld-8.0], not *.cnf
    assert of.includedirs == ["/etc/mysql/conf.d/"]
    assert of.settings["innodb_buffer_pool_size"][1] == "/etc/mysql/conf.d/50-server.cnf:2"


@pytest.mark.parametrize("text,needle", [
    ("[mysqld\nx=1\n", "wrong group definition"),
    ("key_buffer_size=1M\n", "before any [group]"),
    ("[mysqld]\n= 5\n", "cannot read"),
    ("[mysqld]\n!include\n", "include directive"),
])
def test_malformed_files_name_file_and_line(tmp_path, text, needle):
    sr = _tree(tmp_path, {"/etc/my.cnf": text})
    with pytest.raises(myconf.OptionFileError) as e:
        myconf.read_option_file(sr, "/etc/my.cnf", GROUPS, myconf.OptionFiles())
    assert needle in str(e.value) and "/etc/my.cnf:" in str(e.value)
    assert "\n" not in str(e.value)


def test_include_loop_and_missing_include(tmp_path):
    sr = _tree(tmp_path, {"/etc/a.cnf": "[mysqld]\n!include /etc/b.cnf\n",
                          "/etc/b.cnf": "!include /etc/a.cnf\n"})
    with pytest.raises(myconf.OptionFileError, match="include loop"):
        myconf.read_option_file(sr, "/etc/a.cnf", GROUPS, myconf.OptionFiles())
    sr = _tree(tmp_path, {"/etc/c.cnf": "!include /etc/nope.cnf\n"})
    with pytest.raises(myconf.OptionFileError, match="cannot be read"):
        myconf.read_option_file(sr, "/etc/c.cnf", GROUPS, myconf.OptionFiles())


def test_command_line_and_default_files():
    argv = ("/usr/sbin/mariadbd", "--defaults-file=/x/my.cnf", "--user=mysql",
            "--innodb-buffer-pool-size=3G", "--skip-large-pages", "--large-pages")
    files, extra = myconf.default_files(argv, None)
    assert files == ["/x/my.cnf"] and extra == []
    cl = myconf.cmdline_settings(argv)
    assert cl["innodb_buffer_pool_size"][0] == "3G" and cl["large_pages"][0] == "ON"
    assert myconf.default_files(("mysqld", "--no-defaults"), None) == ([], [])


def test_sizes():
    assert myconf.parse_size("x", "2G") == 2 << 30 and myconf.parse_size("x", "512k") == 512 << 10
    assert myconf.parse_size("x", "1048576") == 1 << 20
    with pytest.raises(myconf.OptionFileError, match="not a size"):
        myconf.parse_size("innodb_buffer_pool_size", "2 gigs")


def test_allocations_single_pool_and_small_buffers_stay_small():
    s = {"innodb_buffer_pool_size": "1001M", "innodb_log_buffer_size": "33M",
         "key_buffer_size": "0", "aria_pagecache_buffer_size": "1M"}
    allocs = mysizing.allocations(s, "mariadb", (10, 11, 19))
    by = {a.what: a.bytes for a in allocs}
    assert by["InnoDB buffer pool"] == 1008 << 20            # rounded up to 8 MiB
    assert by["InnoDB log buffer 1"] == by["InnoDB log buffer 2"] == 33 << 20
    assert "key cache" not in by
    # each allocation rounded up on its own; the <2 MiB Aria cache stays on 4 KiB pages
    # + 3 pages: the io_uring allowance (MariaDB >= 10.6 with innodb_use_native_aio)
    assert mysizing.pages_needed(allocs, 2048) == 504 + 17 + 17 + 3
    assert mysizing.pages_needed([a for a in allocs if not a.allowance], 2048) == 504 + 17 + 17
    off = mysizing.allocations({**s, "innodb_use_native_aio": "OFF"}, "mariadb", (10, 11, 19))
    assert not any(a.allowance for a in off)
    assert mysizing.pages_needed(allocs, 1048576) == 0  # every buffer is below 1 GiB


def test_allocations_key_cache_segments_and_counted_blocks():
    s = {"innodb_buffer_pool_size": "128M", "key_buffer_size": "64M", "key_cache_segments": "4"}
    est = mysizing.allocations(s, "mariadb", (10, 11, 19))
    segs = [a for a in est if a.what.startswith("key cache")]
    assert len(segs) == 4 and all(a.bytes < 16 << 20 for a in segs) and not segs[0].exact
    exact = mysizing.allocations(s, "mariadb", (10, 11, 19), {"key_cache": [13389] * 4, "aria": [15647]})
    segs = [a for a in exact if a.what.startswith("key cache")]
    assert [a.bytes for a in segs] == [13389 * 1024] * 4 and all(a.exact for a in exact)


def test_older_versions_use_chunks_and_say_estimate():
    s = {"innodb_buffer_pool_size": "1G", "innodb_buffer_pool_chunk_size": "128M",
         "innodb_buffer_pool_instances": "2", "key_buffer_size": "0"}
    allocs = mysizing.allocations(s, "mysql", (8, 0, 36))
    chunks = [a for a in allocs if a.what.startswith("InnoDB buffer pool chunk")]
    assert len(chunks) == 8 and all(a.bytes > 128 << 20 and not a.exact for a in chunks)
    assert not any("log buffer" in a.what for a in allocs)   # MySQL: not on large pages
    assert versions.model("mariadb", (10, 11, 12)).single_pool
    assert not versions.model("mariadb", (10, 11, 11)).single_pool
    assert not versions.model("mysql", (8, 4, 0)).single_pool


def test_dsn_parsing_keeps_password_out_of_messages():
    kw = mydisc.parse_dsn("mysql://app:s%40cret@db1:3307/")
    assert kw == {"user": "app", "password": "s@cret", "host": "db1", "port": 3307}
    kw = mydisc.parse_dsn("mysql://root@localhost/?unix_socket=/run/x.sock")
    assert kw["unix_socket"] == "/run/x.sock" and "host" not in kw
    with pytest.raises(Exception) as e:
        mydisc.parse_dsn("postgresql://app:topsecret@db/")
    assert "topsecret" not in str(e.value)
    shown = mydisc.dsn_error(RuntimeError("Access denied (using password topsecret) for "
                                          "mysql://a:topsecret@h/"), "mysql://a:topsecret@h/")
    assert "topsecret" not in shown and "mysql://a:***@h/" in shown


def test_option_edit_in_place_and_dropin():
    a = myactions.MyOption("/x.cnf", "large_pages", "ON", False, engine="mysql")
    # at the end of the last server group, where it wins over anything before it
    assert a.render("[client]\nx=1\n[mysqld]\nport=1\n") == \
        "[client]\nx=1\n[mysqld]\nport=1\nlarge_pages = ON\n"
    assert a.render("[mysqld]\nlarge-pages = OFF\n") == "[mysqld]\nlarge_pages = ON\n"
    # the occurrence the server takes is the last in its groups; [client] lines are not its
    two = "[mysqld]\nlarge_pages = OFF\n[client]\nlarge_pages = OFF\n[mysqld]\nlarge-pages\n"
    assert a.render(two) == \
        "[mysqld]\nlarge_pages = OFF\n[client]\nlarge_pages = OFF\n[mysqld]\nlarge_pages = ON\n"
    assert a.read_value("[mysqld]\nlarge_pages = ON\n[client]\nlarge_pages = OFF\n") == "ON"
    assert a.render("") == "[mysqld]\nlarge_pages = ON\n"
    d = myactions.MyOption("/d/99-hpadvise.cnf", "large_pages", "ON", True, engine="mysql")
    assert "[mysqld]\nlarge_pages = ON\n" in d.render(None)


def _server_instance(version, flavour, settings):
    from hpadvise.api.engines import Instance
    s = mydisc.Server(pid=None, flavour=flavour, version=version, settings=settings)
    i = Instance("mysql", "mysql:x", "x", running=False, state=s)
    return i


def test_sysv_finding_only_for_versions_that_use_shm(hosts):
    from hpadvise.facts import host
    from hpadvise.api import profiles
    from hpadvise.api.engines import registry
    facts = host.collect(SysRoot(hosts / "no-pools"))
    prof = profiles.load("oltp", registry.profile_schemas())
    eng = my.MySQLEngine()
    codes = lambda v, f: {x.code for x in eng.findings(  # noqa: E731
        _server_instance(v, f, {"large_pages": "ON"}), facts, prof)}
    assert "my.sysv_shm" in codes("5.7.44", "mysql")
    assert "my.sysv_shm" in codes("10.4.32-MariaDB", "mariadb")
    assert "my.sysv_shm" not in codes("8.0.36", "mysql")
    assert "my.sysv_shm" not in codes("10.11.19-MariaDB", "mariadb")
    # the change the plan asks for, per profile
    off = _server_instance("10.11.19-MariaDB", "mariadb", {"large_pages": "OFF"})
    ch = eng.changes(off, 2048, facts, prof)
    assert [(c.target, c.current, c.recommended, c.restart) for c in ch] == \
        [("large_pages", "OFF", "ON", True)]
    on = _server_instance("10.11.19-MariaDB", "mariadb", {"large_pages": "1"})
    assert eng.changes(on, 2048, facts, prof) == []


def test_fallback_lines_from_the_tail_of_a_big_log(tmp_path):
    log = tmp_path / "err.log"
    old = "2026-01-01 0 [Warning] mariadbd: Couldn't allocate 1 bytes (Large/HugeTLB memory " \
          "page size 2097152); errno 12; continuing to smaller size\n"
    with open(log, "w") as f:
        f.write(old)  # a previous run's warning: not ours
        f.write("x" * 100 + "\n" * 1)
        f.write("[Note] Starting MariaDB 10.11.19 as process 4242\n")
        f.write(old.replace("2026-01-01", "2026-02-02"))
        f.write("[Note] mariadbd: ready for connections.\n")
    s = mydisc.Server(pid=4242, settings={"log_error": str(log)})
    lines = mydisc.fallback_lines(SysRoot("/"), s)
    assert len(lines) == 1 and lines[0].startswith("2026-02-02")
    sr = SysRoot("/")
    assert sr.read_tail(str(log), 60).startswith("[Note] mariadbd: ready") or \
        "ready for connections" in sr.read_tail(str(log), 60)
    assert mydisc.fallback_lines(SysRoot("/"), mydisc.Server(pid=1, settings={})) is None


@pytest.mark.parametrize("auto", [
    # MySQL 8.0.x's first format, and the one since (Reference Manual, 5.1.9.3); made from
    # the manual's examples, not captured (no MySQL can be installed here)
    {"Version": 1, "mysql_server": {"mysql_server_static_options": {
        "large_pages": {"Value": "OFF", "Metadata": {"Timestamp": 1, "User": "root",
                                                     "Host": "localhost"}}}}},
    {"Version": 2, "mysql_static_variables": {
        "large_pages": {"Value": "OFF", "Metadata": {"Timestamp": 1, "User": "root",
                                                     "Host": "localhost"}}}},
])
def test_set_persist_outranks_the_option_files_and_is_not_changed(tmp_path, auto):
    import json
    from hpadvise.plugins.mysql import findings as myfindings
    from hpadvise.plugins.mysql.conf import OptionFiles
    from hpadvise.plugins.mysql.layers import winning
    data = tmp_path / "var/lib/mysql"
    data.mkdir(parents=True)
    (data / "mysqld-auto.cnf").write_text(json.dumps(auto))
    of = OptionFiles(settings={"large_pages": ("ON", "/etc/mysql/my.cnf:3")})
    lay = winning(SysRoot(tmp_path), ("mysqld", "--large-pages"), "/var/lib/mysql", of,
                  "large_pages")
    assert not lay.changeable and lay.where.startswith("SET PERSIST (")
    assert "RESET PERSIST large_pages" in lay.how
    # without it, the command line wins over the files; without that, the file's line
    (data / "mysqld-auto.cnf").unlink()
    lay = winning(SysRoot(tmp_path), ("mysqld", "--skip-large-pages"), "/var/lib/mysql", of,
                  "large_pages")
    assert not lay.changeable and "command line" in lay.where
    lay = winning(SysRoot(tmp_path), ("mysqld",), "/var/lib/mysql", of, "large_pages")
    assert lay.changeable and lay.file == "/etc/mysql/my.cnf"
    s = mydisc.Server(pid=None, next_start={"large_pages": "OFF"})
    s.layers = {"large_pages": winning(SysRoot(tmp_path), ("mysqld", "--skip-large-pages"),
                                       None, of, "large_pages")}
    assert "command line" in myfindings.held_back(s)
