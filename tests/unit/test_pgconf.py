"""postgresql.conf parsing, units and the shared memory estimate (no server needed)."""

import pytest

from hpadvise.api import engines
from hpadvise.plugins.postgres import conf as pgconf
from hpadvise.plugins.postgres import sizing as pgsizing
from hpadvise.facts.sysroot import SysRoot


def write(p, text):
    p.write_text(text)
    return str(p)


def test_includes_quotes_and_precedence(tmp_path):
    (tmp_path / "conf.d").mkdir()
    write(tmp_path / "conf.d" / "10-mem.conf", "shared_buffers = '2GB'\n")
    write(tmp_path / "conf.d" / ".hidden.conf", "shared_buffers = 1kB\n")
    write(tmp_path / "conf.d" / "notes.txt", "garbage ===\n")
    write(tmp_path / "extra.conf", "max_connections 300   # no equals sign is allowed\n")
    main = write(tmp_path / "postgresql.conf", """
# comment
shared_buffers = 128MB
Huge_Pages = try
include 'extra.conf'
include_if_exists 'missing.conf'
include_dir 'conf.d'
search_path = '"$user", public'
log_line_prefix = 'it''s %m '
""")
    s = pgconf.read_conf(SysRoot("/"), main)
    assert s["shared_buffers"][0] == "2GB" and s["shared_buffers"][1].endswith("10-mem.conf:1")
    assert s["huge_pages"][0] == "try"
    assert s["max_connections"][0] == "300"
    assert s["log_line_prefix"][0] == "it's %m "
    assert s["search_path"][0] == '"$user", public'


def test_include_loop_is_an_error(tmp_path):
    write(tmp_path / "a.conf", "include 'b.conf'\n")
    write(tmp_path / "b.conf", "include 'a.conf'\n")
    with pytest.raises(pgconf.ConfError, match="nested more than 10"):
        pgconf.read_conf(SysRoot("/"), str(tmp_path / "a.conf"))


def test_missing_include_is_an_error(tmp_path):
    main = write(tmp_path / "postgresql.conf", "include 'nope.conf'\n")
    with pytest.raises(pgconf.ConfError, match="cannot read .*nope.conf"):
        pgconf.read_conf(SysRoot("/"), main)


def test_syntax_error_names_file_and_line(tmp_path):
    main = write(tmp_path / "postgresql.conf", "a = 1\nshared_buffers = = 3\n")
    with pytest.raises(pgconf.ConfError, match=r"postgresql.conf:2: syntax error"):
        pgconf.read_conf(SysRoot("/"), main)


@pytest.mark.parametrize("name,value,expect", [
    ("shared_buffers", "16384", 16384 * 8192),  # default unit: 8 kB blocks
    ("shared_buffers", "128MB", 128 << 20),
    ("shared_buffers", "1GB", 1 << 30),
    ("shared_buffers", "1.5GB", 3 << 29),
    ("huge_page_size", "2048", 2 << 20),  # default unit: kB
    ("huge_page_size", "1GB", 1 << 30),
    ("wal_buffers", "-1", -8192),
])
def test_memory_units(name, value, expect):
    assert pgconf.parse_memory(name, value) == expect


@pytest.mark.parametrize("value", ["12XB", "128mb", "1 G", "lots"])
def test_bad_memory_units(value):
    # PostgreSQL's units are case-sensitive: 128mb is rejected by the server too
    with pytest.raises(pgconf.ConfError, match="invalid value for shared_buffers"):
        pgconf.parse_memory("shared_buffers", value, "postgresql.conf:3")


def test_pages_formula_matches_ipci():
    # ipci.c: size_b / hp_size + 1 (one more than needed on an exact multiple)
    assert pgsizing.pages_from_bytes(143 << 20, 2048) == 72
    assert pgsizing.pages_from_bytes(4 << 20, 2048) == 3
    assert pgsizing.pages_from_bytes(8399 << 20, 1048576) == 9


def test_redact_dsn():
    assert "s3cret" not in engines.redact_dsn("postgresql://bob:s3cret@db:5432/x")
    assert "s3cret" not in engines.redact_dsn("host=db password=s3cret user=bob")
    assert "cr3t" not in engines.redact_dsn("host=db password='s3 cr3t' user=bob")
    assert "s3cret" not in engines.redact_dsn("postgresql://db/x?user=bob&password=s3cret")
    assert engines.redact_dsn("postgresql://bob@db/x") == "postgresql://bob@db/x"
