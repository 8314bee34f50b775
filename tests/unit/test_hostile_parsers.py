"""Property-based tests (Hypothesis) for every parser that takes what a user or a file hands
hpadvise: postgresql.conf with includes, MySQL option files, profiles, journals, DSNs, sizes,
durations and percentages. Whatever the input, the outcome is a value or one clear line (an
InputError with no newline in it) that holds no secret: never another exception, never a
partial restore. The inputs are generated, so each run tries new ones."""

import itertools
import json
import math
import os
import re
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpadvise.ledger import journal
from hpadvise.api import profiles
from hpadvise.kit import secrets
from hpadvise.changes.actions import File, Pool
from hpadvise.kit.errors import InputError
from hpadvise.plugins.mysql.conf import OptionFiles, read_option_file, server_groups
from hpadvise.plugins.postgres.conf import read_conf
from hpadvise.kit.secrets import check_dsn, redact_dsn, remember_dsn, scrub
from hpadvise.kit.sizing import parse_bytes
from hpadvise.facts.sysroot import SysRoot

# 150 examples a test in the suite; HPADVISE_HYPOTHESIS_EXAMPLES=5000 for a longer hunt.
SETTINGS = settings(max_examples=int(os.environ.get("HPADVISE_HYPOTHESIS_EXAMPLES", 150)),
                    deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def one_line(exc: BaseException) -> None:
    assert isinstance(exc, InputError), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert text and "\n" not in text and len(text) < 1500, text


# ---- postgresql.conf with includes

NAMES = st.sampled_from(["shared_buffers", "huge_pages", "max_connections", "work_mem",
                         "huge_page_size", "x.y", "1bad", "port", "include", "include_dir",
                         "include_if_exists", ""])
VALUES = st.one_of(st.sampled_from(["128MB", "'on'", "TrY", "'unterminated", "''", "'a''b'",
                                    "'x\\'y'", "= =", "100", "-1", "'conf.d'", "'self.conf'",
                                    "'missing.conf'", "'/etc/passwd'"]),
                   st.text(string.printable, max_size=12))


@st.composite
def conf_text(draw):
    lines = draw(st.lists(st.one_of(
        st.builds(lambda n, sep, v: f"{n}{sep}{v}", NAMES, st.sampled_from([" = ", "=", " "]),
                  VALUES),
        st.sampled_from(["# comment", "", "   ", "\t# x = 1"]),
        st.text(string.printable, max_size=30)), max_size=12))
    return "\n".join(lines) + "\n"


@SETTINGS
@given(main=conf_text(), other=conf_text())
def test_postgresql_conf_with_includes(tmp_path, main, other):
    d = tmp_path / "pg"
    (d / "conf.d").mkdir(parents=True, exist_ok=True)
    (d / "postgresql.conf").write_text(main)
    (d / "self.conf").write_text(other + "include 'self.conf'\n")
    (d / "conf.d" / "a.conf").write_text(other)
    try:
        out = read_conf(SysRoot("/"), str(d / "postgresql.conf"))
    except Exception as exc:  # noqa: BLE001 (the property: only InputError, one line)
        one_line(exc)
        return
    for name, (value, where) in out.items():
        assert re.fullmatch(r"[a-z_][\w.]*", name) and ":" in where


# ---- MySQL option files

@st.composite
def cnf_text(draw):
    lines = draw(st.lists(st.one_of(
        st.sampled_from(["[mysqld]", "[client]", "[mariadb-10.11]", "[mysqld", "[]",
                         "!include missing.cnf", "!include self.cnf", "!includedir inc",
                         "!bogus", "# c", "; c", "large_pages", "skip-large-pages",
                         "password = SecretCnf9", "loose-x = 1"]),
        st.builds(lambda n, v: f"{n} = {v}", st.sampled_from(
            ["innodb_buffer_pool_size", "large-pages", "key_buffer_size", "bad name", "=x"]),
            st.text(string.printable.replace("\n", ""), max_size=10)),
        st.text(string.printable, max_size=25)), max_size=12))
    return "\n".join(lines) + "\n"


@SETTINGS
@given(main=cnf_text(), other=cnf_text())
def test_option_files_with_includes(tmp_path, main, other):
    d = tmp_path / "my"
    (d / "inc").mkdir(parents=True, exist_ok=True)
    (d / "my.cnf").write_text(main.replace("self.cnf", str(d / "self.cnf"))
                              .replace("inc\n", f"{d / 'inc'}\n"))
    (d / "self.cnf").write_text(other + f"!include {d / 'self.cnf'}\n")
    (d / "inc" / "a.cnf").write_text(other)
    out = OptionFiles()
    try:
        read_option_file(SysRoot("/"), str(d / "my.cnf"), server_groups("mariadb", (10, 11)),
                         out)
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        assert "SecretCnf9" not in str(exc)
        return
    assert all(re.fullmatch(r"[a-z][\w.]*", k) for k in out.settings)


# ---- profiles

NUMBER = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True,
                                                          allow_infinity=True),
                   st.booleans(), st.text(max_size=5))
KEYS = st.sampled_from(["headroom_pct", "headroom_min_pages", "os_floor", "os_floor_pct",
                        "gigantic", "gigantic_min", "gigantic_max_waste_pct", "bogus"])


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)


@SETTINGS
@given(pool=st.dictionaries(KEYS, NUMBER, max_size=5), min_free=NUMBER,
       enabled=st.sampled_from(["always", "madvise", "never", "keep", "sometimes", 3]))
def test_profiles(tmp_path, pool, min_free, enabled):
    text = ['name = "p"', "[thp]", f"enabled = {toml_value(enabled)}", "[pool]"]
    text += [f"{k} = {toml_value(v)}" for k, v in pool.items()]
    text += ["[commit]", f"min_free_pct = {toml_value(min_free)}"]
    path = tmp_path / "p.toml"
    path.write_text("\n".join(text) + "\n")
    try:
        p = profiles.load(str(path))
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        return
    for v in (p.headroom_pct, p.os_floor_pct, p.gigantic_max_waste_pct, p.commit_min_free_pct):
        assert math.isfinite(v) and v >= 0
    assert 0 <= p.os_floor_pct <= 100 and 0 <= p.commit_min_free_pct <= 100
    assert p.headroom_min_pages >= 0 and p.os_floor_bytes >= 0


# ---- journals: checked whole before anything is restored

def _journal(tmp_path):
    """A journal of two real changes on files under tmp_path: a file created and a pool of a
    copied tree, and what the files hold after the apply."""
    d = tmp_path / "j"
    journal.open_dir(str(d))
    j = journal.Journal.create(str(d), {"argv": ["apply"]})
    f = File(str(tmp_path / "made.conf"))
    e = j.intent(f, None, File.encode("x = 1\n"))
    f.set(File.encode("x = 1\n"))
    j.done(e, f.get())
    pool = tmp_path / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
    pool.parent.mkdir(parents=True, exist_ok=True)
    pool.write_text("5\n")
    p = Pool(2048, root=str(tmp_path))
    e = j.intent(p, 0, 5)
    j.done(e, 5)
    j.finish("ok")
    return j.path, f, pool


_runs = itertools.count()


@SETTINGS
@given(cut=st.floats(0, 1), junk=st.one_of(st.none(), st.sampled_from(
    ['"zero"', '-3', '[1]', '{"sealed": "../../etc/shadow"}', 'null', '"bm90IGJhc2U2NA!"',
     '{"file": "@@@"}', '1e309'])), which=st.integers(0, 5))
def test_journals_damaged_any_way(tmp_path, cut, junk, which):
    path, f, pool = _journal(tmp_path / str(next(_runs)))
    data = open(path, "rb").read()
    lines = data.decode().splitlines()
    if junk is not None:  # an edited old value
        n = [i for i, ln in enumerate(lines) if '"type": "intent"' in ln][which % 2]
        lines[n] = re.sub(r'"old": (null|\d+|\{[^}]*\})', f'"old": {junk}', lines[n])
        data = ("\n".join(lines) + "\n").encode()
    data = data[:max(1, int(len(data) * cut))] if cut < 1 else data
    open(path, "wb").write(data)
    before = (os.path.exists(f.path), pool.read_text())
    try:
        j = journal.Journal.load(path)
        done, errors = journal.rollback(j)
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        assert (os.path.exists(f.path), pool.read_text()) == before  # nothing restored
        return
    for e in errors:
        assert "\n" not in e


# ---- DSNs: refused in one line, or redacted; never a piece of the password

PASSWORD = st.text(string.ascii_letters + string.digits + "/@?#:%&=+!$*'\" ;\\", min_size=6,
                   max_size=16).map(lambda s: "Zq" + s + "9x")


def _kv_quoted(pw: str) -> str:
    """A password as libpq's key=value form quotes it: in single quotes, ' and \\ escaped."""
    return "'" + pw.replace("\\", "\\\\").replace("'", "\\'") + "'"


@SETTINGS
@given(pw=PASSWORD, form=st.sampled_from([
    "postgresql://app:{pw}@db1:5432/postgres", "postgres://app:{pw}@/db?host=/tmp",
    "mysql://root:{pw}@127.0.0.1:3306/", "postgresql://db1/x?password={qv}&sslmode=require",
    "host=db1 password={q} dbname=x", "host=db1 user=app password={bare} dbname=x",
    "app:{pw}@db1", "postgresql://app:{pw}@db1:notaport/x"]))
def test_dsns_never_show_their_password(pw, form):
    """Refused in one line without the password, or redacted; once seen, the password (and
    any piece of four characters or more a parser could split off) is gone from any text."""
    secrets._KNOWN.clear()  # each example on its own: what earlier ones taught is forgotten
    bare = re.sub(r"[\s'\"=\\]", "", pw)  # what an unquoted key=value can hold
    qv = re.sub(r"[&#\s]", "", pw)  # what a query value can hold (& starts the next one)
    dsn = form.format(pw=pw, q=_kv_quoted(pw), bare=bare, qv=qv)
    secret = bare if "{bare}" in form else qv if "{qv}" in form else pw
    try:
        check_dsn(dsn)
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        assert secret not in str(exc) and secret[2:-2] not in str(exc)
    remember_dsn(dsn)
    core = secret[2:-2]
    pieces = [p for p in re.split(r"[/@?#:&=%'\" ;\\]", core)
              if len(p) >= 4 and not p.isalpha()]  # not a word of the message itself
    for text in (redact_dsn(dsn), scrub(dsn), scrub(f'invalid port number: "{secret}"'),
                 scrub(f"could not translate host name \"{secret}@db1\"")):
        assert secret not in text and not any(p in text for p in pieces), (dsn, text)


@SETTINGS
@given(pw=PASSWORD)
def test_libpq_errors_never_show_the_password(pw):
    """libpq's own error for a DSN that does not connect (a closed port), through the line
    check prints."""
    from hpadvise.api.engines import error_line
    from hpadvise.plugins.postgres.libpq import Connection, PqError
    secrets._KNOWN.clear()
    for dsn in (f"postgresql://app:{pw}@127.0.0.1:1/db", f"host=127.0.0.1 port=1 user=app "
                f"password={pw} dbname=db connect_timeout=1", f"app:{pw}@127.0.0.1:1"):
        try:
            check_dsn(dsn)
        except InputError:
            continue
        remember_dsn(dsn)
        try:
            Connection({"dbname": dsn, "connect_timeout": 1})
        except PqError as exc:
            line = scrub(error_line(exc, dsn))
            # pieces a parser could split off (words such as FATAL may come from libpq)
            pieces = [p for p in re.split(r"[/@?#:&=%'\" ;\\]", pw[2:-2])
                      if len(p) >= 4 and not p.isalpha()]
            assert pw not in line and not any(p in line for p in pieces), line


# ---- sizes, durations, percentages

@SETTINGS
@given(text=st.one_of(st.text(max_size=12), st.sampled_from(
    ["nan", "inf", "-1GB", "1e400GB", "99999999999999999999TB", "2GiB", " 1 g ", "0",
     "1.5GB", "12QB"])))
def test_sizes(text):
    try:
        n = parse_bytes(text, "--buffers")
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        return
    assert isinstance(n, int) and n >= 0


@SETTINGS
@given(text=st.one_of(st.text(max_size=10), st.sampled_from(
    ["10m", "0s", "99999999999999h", "1h", "168h", "169h", "-5m", "nan", "1e9s"])))
def test_durations(text):
    from hpadvise.benchmarks.variants import MAX_DURATION_S, parse_duration
    try:
        s = parse_duration(text)
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        return
    assert 1 <= s <= MAX_DURATION_S


@SETTINGS
@given(text=st.one_of(st.text(max_size=8), st.sampled_from(
    ["nan%", "inf", "-1%", "0%", "100%", "1e-9%", "2%", "0.5"])))
def test_percentages(text):
    from hpadvise.cli.common import pct
    try:
        v = pct(text, "--band")
    except Exception as exc:  # noqa: BLE001
        one_line(exc)
        return
    assert math.isfinite(v) and 0 < v < 100
