"""Secrets never leave hpadvise: redaction of option files, conninfo, URLs, command lines and
environments, and snapshots written for their owner only, without environments unless asked."""

import os
import stat

from hpadvise.kit.secrets import redact_args, redact_dsn, redact_environ, redact_text
from hpadvise.outputs.snapshot import write_snapshot
from hpadvise.facts.sysroot import SysRoot

SECRET = "S3cretValue"


def test_option_files_and_conninfo_keep_everything_but_the_password():
    cnf = f"[client]\nuser = app\npassword = {SECRET}\n[mysqld]\nlarge_pages = ON\n"
    out = redact_text(cnf)
    assert SECRET not in out and "password = ***" in out
    assert "user = app\n" in out and "large_pages = ON\n" in out
    conf = f"primary_conninfo = 'host=db1 user=rep password={SECRET} port=5432'\n"
    out = redact_text(conf)
    assert SECRET not in out and "port=5432" in out and "host=db1" in out
    quoted = f"password=\"{SECRET} with space\"\n"
    assert SECRET not in redact_text(quoted)


def test_urls_dsns_and_query_parameters():
    for dsn in (f"postgresql://app:{SECRET}@db1:5432/postgres",
                f"mysql://root:{SECRET}@127.0.0.1:3306",
                f"host=db1 user=app password={SECRET}",
                f"postgresql://db1/x?sslmode=require&password={SECRET}"):
        assert SECRET not in redact_dsn(dsn), dsn
        assert SECRET not in redact_text(dsn), dsn
    assert redact_dsn("postgresql://app@db1/x") == "postgresql://app@db1/x"


def test_a_dsn_with_a_user_and_no_password_is_no_secret():
    """It names the instance (its id, its errors): scrubbing it whole would print `***` for
    the host and make the id useless to --instance. One with a password still loses it."""
    from hpadvise.kit.secrets import remember_dsn, scrub
    plain = "postgresql://app-nopw@db-user-alone:5432/postgres"
    remember_dsn(plain)
    assert scrub(f"cannot connect to {plain}") == f"cannot connect to {plain}"
    remember_dsn(f"postgresql://app:{SECRET}x@db-user-alone:5432/postgres")
    assert SECRET not in scrub(f"postgresql://app:{SECRET}x@db-user-alone:5432/postgres")
    odd = "postgresql://db-user-alone/x?user=a@b"  # an @ that is no userinfo's: kept out
    remember_dsn(odd)
    assert scrub(odd) == "***"


def test_command_lines():
    argv = ["java", f"-Ddb.password={SECRET}", "-Xmx1g", "--password", SECRET,
            f"--api-key={SECRET}", f"jdbc:postgresql://app:{SECRET}@db/x", "-XX:+UseLargePages"]
    out = redact_args(argv)
    assert SECRET not in " ".join(out)
    assert out[0] == "java" and "-Xmx1g" in out and "-XX:+UseLargePages" in out
    assert out[3:5] == ("--password", "***")


def test_environments():
    env = {"PGPASSWORD": SECRET, "MYSQL_PWD": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET,
           "GITHUB_TOKEN": SECRET, "DATABASE_URL": f"postgres://u:{SECRET}@h/d",
           "JAVA_TOOL_OPTIONS": f"-Xmx2g -Dapp.password={SECRET}",
           "PWD": "/home/app", "PATH": "/usr/bin"}
    out = redact_environ(env)
    assert SECRET not in repr(out)
    assert out["PWD"] == "/home/app" and out["PATH"] == "/usr/bin"
    assert out["JAVA_TOOL_OPTIONS"].startswith("-Xmx2g ")


def test_text_without_secret_names_is_untouched(hosts):
    for state, rel in (("no-pools", "proc/meminfo"), ("pg-cgroup-v2", "proc/self/mountinfo"),
                       ("no-pools", "proc/vmstat"), ("no-pools", "proc/self/smaps")):
        text = (hosts / state / rel).read_text()
        assert redact_text(text) == text, rel


def _planted(tmp_path):
    root = tmp_path / "host"
    (root / "proc/4242").mkdir(parents=True)
    (root / "etc/mysql").mkdir(parents=True)
    (root / "proc/meminfo").write_text("MemTotal: 1000 kB\n")
    (root / "proc/4242/cmdline").write_bytes(
        f"java\0-Dpassword={SECRET}\0-Xmx1g\0".encode())
    (root / "proc/4242/environ").write_bytes(
        f"PGPASSWORD={SECRET}\0LANG=C\0".encode())
    (root / "etc/mysql/my.cnf").write_text(f"[client]\npassword={SECRET}\n")
    sr = SysRoot(root, record=True)
    for p in ("/proc/meminfo", "/proc/4242/cmdline", "/proc/4242/environ",
              "/etc/mysql/my.cnf"):
        assert sr.read(p) is not None
    return sr


def _everything(d):
    out = b""
    for dirpath, dirs, files in os.walk(d):
        assert stat.S_IMODE(os.stat(dirpath).st_mode) == 0o700, dirpath
        for f in files:
            p = os.path.join(dirpath, f)
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
            out += open(p, "rb").read()
    return out


def test_snapshot_is_private_redacted_and_leaves_environments_out(tmp_path):
    sr = _planted(tmp_path)
    out = tmp_path / "snap"
    write_snapshot(sr, str(out))
    data = _everything(out)
    assert SECRET.encode() not in data
    assert not (out / "proc/4242/environ").exists()
    assert (out / "proc/4242/cmdline").read_bytes() == b"java\0-Dpassword=***\0-Xmx1g\0"
    assert (out / "proc/meminfo").read_text() == "MemTotal: 1000 kB\n"
    # asked for, environments are kept with the secret values replaced
    out2 = tmp_path / "snap2"
    write_snapshot(sr, str(out2), environ=True)
    assert SECRET.encode() not in _everything(out2)
    assert (out2 / "proc/4242/environ").read_bytes() == b"PGPASSWORD=***\0LANG=C\0"


def test_journal_keeps_whole_files_apart_and_restores_them_exactly(tmp_path):
    import base64

    from hpadvise.ledger import journal
    from hpadvise.changes.actions import File
    cnf = tmp_path / "my.cnf"
    original = f"[client]\npassword={SECRET}\n[mysqld]\nlarge_pages = OFF\n".encode()
    cnf.write_bytes(original)
    jdir = tmp_path / "journal"
    jdir.mkdir(mode=0o700)
    a = File(str(cnf), mode=0o600)
    j = journal.Journal.create(str(jdir), {"argv": ["apply"]})
    old = a.get()
    new = File.encode(f"[client]\npassword={SECRET}\n[mysqld]\nlarge_pages = ON\n")
    e = j.intent(a, old, new)
    a.set(new)
    j.done(e, a.get())
    j.finish("ok")
    record = open(j.path, "rb").read()
    assert SECRET.encode() not in record and old.encode() not in record
    assert base64.b64encode(SECRET.encode())[:8] not in record
    sealed = jdir / (j.id + ".sealed")
    assert stat.S_IMODE(os.stat(sealed).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in sealed.iterdir())
    back = journal.Journal.load(j.path)
    assert back.entries[0].old == old and back.entries[0].actual == new
    restored, errors = journal.rollback(back)
    assert not errors and cnf.read_bytes() == original
