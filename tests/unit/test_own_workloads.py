"""validate on the user's own workload and data, the parts that need no server: pgreplay's
report (captured from a real replay), the log formats, a copy's configuration, the reset of a
copy's data, following a log as capture does, and the options' checks."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpadvise.benchmarks.options import Options
from hpadvise.benchmarks.own import check_own, file_hash, origins
from hpadvise.benchmarks.wording import origin_lines
from hpadvise.kit.errors import InputError
from hpadvise.plugins.postgres.validate.capture_log import Follower, csv_name
from hpadvise.plugins.postgres.validate.copying import (CONFIG_FILES, conf_value, kept, reset_data,
                                               source_settings)
from hpadvise.plugins.postgres.validate.replay import (ReplayMismatch, log_format, log_span,
                                              parse_stats)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "pgreplay"
CSV = ('2026-11-25 20:22:02.346 UTC,"shop","shop",6182,"[local]",6b07436a.1826,3,"idle",'
       '2026-11-25 20:22:02 UTC,3/2,0,LOG,00000,"statement: SELECT 1",,,,,,,,,"app",'
       '"client backend",,0\n')
STDERR = "2026-11-25 20:22:02.346 UTC|shop|shop|6b07436a.1826|LOG:  statement: SELECT 1\n"


def test_replay_report_parsed():
    s = parse_stats((FIX / "replay-pg15.txt").read_text())
    assert (s.seconds, s.statements, s.errors, s.error_pct, s.connections) == \
        (5.539, 79407, 0, 0.0, 7)
    with pytest.raises(ValueError):
        parse_stats("Parse statistics\n================\n")


@pytest.mark.parametrize("said,seconds", [(" 1 minutes 5.250 seconds", 65.25),
                                          (" 2 hours 0 minutes 1.000 seconds", 7201.0),
                                          (" 1 hours 3.500 seconds", 3603.5)])
def test_long_replays_are_timed_in_hours_and_minutes(said, seconds):
    text = (FIX / "replay-pg15.txt").read_text().replace(" 5.539 seconds", said)
    assert parse_stats(text).seconds == seconds


def test_a_replay_with_errors_is_refused():
    text = (FIX / "replay-pg15.txt").read_text().replace(
        "(0 or 0.000% of these", "(2000 or 2.519% of these")
    s = parse_stats(text)
    assert s.errors == 2000
    exc = ReplayMismatch(s)
    assert isinstance(exc, InputError) and "2000 of 79407" in str(exc)


@pytest.mark.parametrize("first,fmt", [(CSV, "csv"), (STDERR, "stderr")])
def test_log_formats(tmp_path, first, fmt):
    p = tmp_path / "log"
    p.write_text(first + first.replace("20:22:02.346", "20:27:02.346"))
    assert log_format(str(p)) == fmt
    assert log_span(str(p)) == pytest.approx(300.0)


@pytest.mark.parametrize("first", [
    "garbage\n",
    "2026-11-25 20:22:02.346 UTC [5346] LOG:  starting PostgreSQL\n",  # Debian's prefix
    ""])
def test_other_logs_are_refused(tmp_path, first):
    p = tmp_path / "log"
    p.write_text(first)
    with pytest.raises(InputError, match="not a statement log"):
        log_format(str(p))


def test_a_copy_takes_the_sources_settings_but_never_its_files_or_log():
    rows = "\n".join(["archive_command|cp %p /mnt/archive/%f", "data_directory|/srv/pg",
                      "log_directory|/var/log/pg", "logging_collector|on", "port|5433",
                      "shared_buffers|8GB", "ssl|on", "work_mem|64MB",
                      "search_path|\"$user\", it's"])
    lines = source_settings(lambda sql: rows)
    assert lines == ["shared_buffers = '8GB'", "work_mem = '64MB'",
                     "search_path = '\"$user\", it''s'"]
    assert not kept("primary_conninfo") and not kept("log_statement") and kept("huge_pages")
    assert conf_value("a\\b") == "'a\\\\b'"


def test_reset_puts_the_data_back_and_keeps_the_configuration(tmp_path):
    pristine, data = tmp_path / "pristine", tmp_path / "data"
    for d, text in ((pristine, "old"), (data, "new")):
        (d / "base" / "1").mkdir(parents=True)
        (d / "base" / "1" / "16384").write_text(text)
        for name in CONFIG_FILES:
            (d / name).write_text(f"{d.name} {name}")
    (data / "base" / "1" / "16390").write_text("made by a run")
    (data / "pg_stat").mkdir()
    reset_data(str(pristine), str(data))
    assert (data / "base" / "1" / "16384").read_text() == "old"
    assert not (data / "base" / "1" / "16390").exists() and not (data / "pg_stat").exists()
    for name in CONFIG_FILES:  # the run's own settings, options and mark stay
        assert (data / name).read_text() == f"data {name}"


def test_capture_follows_a_stderr_log_from_the_prefix_on(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("2026-11-25 20:00:00.000 UTC [1] LOG:  before the capture\n")
    f = Follower(str(tmp_path / "out.log"), "stderr", str(tmp_path), str(log))
    with open(log, "a") as w:
        w.write("2026-11-25 20:00:01.000 UTC [1] LOG:  received SIGHUP\n"
                + STDERR.replace("SELECT 1", "SELECT 1,")
                + "\t2;\n"  # a statement's second line
                + "2026-11-25 20:00:01.500 UTC [9] LOG:  a backend not reloaded yet\n"
                + "\tits second line\n" + STDERR + "half a li")
    f.pump()
    f.close()
    assert (tmp_path / "out.log").read_text() == \
        STDERR.replace("SELECT 1", "SELECT 1,") + "\t2;\n" + STDERR
    assert f.bytes == os.path.getsize(tmp_path / "out.log")


def test_capture_follows_csvlog_across_a_rotation(tmp_path):
    (tmp_path / "log").mkdir()
    old = tmp_path / "log" / "pg.csv"
    old.write_text(CSV.replace("SELECT 1", "SELECT 'from before'"))  # a fixed log_filename
    (tmp_path / "current_logfiles").write_text("stderr log/pg.log\n")
    f = Follower(str(tmp_path / "out.csv"), "csv", str(tmp_path), None)
    assert csv_name("log/pg.log") == "log/pg.csv" and csv_name("log/x") == "log/x.csv"
    (tmp_path / "current_logfiles").write_text("stderr log/pg.log\ncsvlog log/pg.csv\n")
    with open(old, "a") as w:
        w.write(CSV)
    f.pump()
    (tmp_path / "log" / "pg-2.csv").write_text(CSV.replace("SELECT 1", "SELECT 2"))
    (tmp_path / "current_logfiles").write_text("csvlog log/pg-2.csv\n")
    f.pump()
    f.close()
    assert (tmp_path / "out.csv").read_text() == CSV + CSV.replace("SELECT 1", "SELECT 2")


def test_capture_ends_once_its_log_is_quiet_or_after_a_second(tmp_path):
    """The end of a capture copies what the server logged before the reload: a log written
    from another thread until it falls quiet is copied whole, without the whole second; one
    that never falls quiet is copied up to the second's end."""
    import threading
    import time
    log = tmp_path / "server.log"
    log.write_text("")

    def write(lines: int, every: float) -> None:
        with open(log, "a") as w:
            for _ in range(lines):
                w.write(STDERR)
                w.flush()
                time.sleep(every)
    # (lines written, seconds apart, the settle's longest wait, the bounds of the time it took)
    for lines, every, most, took_in in ((4, 0.05, 3.0, (0.65, 2.5)), (200, 0.02, 1.0, (1, 2))):
        f = Follower(str(tmp_path / "out.log"), "stderr", str(tmp_path), str(log))
        w = threading.Thread(target=write, args=(lines, every))
        t0 = time.monotonic()
        w.start()
        f.settle(quiet_s=0.5, most_s=most)  # a loaded worker's thread may stall a little
        took = time.monotonic() - t0
        w.join()
        f.close()
        copied = (tmp_path / "out.log").read_text().count(STDERR)
        assert took_in[0] <= took <= took_in[1], (lines, took)
        assert copied == lines if lines == 4 else 0 < copied < lines, (lines, copied)


def opts(**kw) -> Options:
    return Options(variants=["current", "recommended"], duration_s=600, db="postgres", **kw)


@pytest.mark.parametrize("kw,said", [
    ({"script": "a.sql", "replay": "b.csv"}, "exclude each other"),
    ({"script": "a.sql", "workload": "select"}, "leave out --workload"),
    ({"copy": True}, "name it with --instance"),
    ({"copy": True, "instance": "main", "allow_restart": True, "script": "a"}, "never restarts"),
    ({"copy": True, "instance": "main"}, "add --script FILE"),
    ({"database": "shop"}, "needs --copy or --replay"),
    ({"copy": True, "instance": "main", "script": "a", "scale": 10}, "leave out --scale"),
    ({"replay_speed": 2.0}, "needs --replay"),
    ({"replay": "x", "replay_speed": 0.0}, "factor above 0"),
    ({"replay": "x", "replay_speed": float("nan")}, "factor above 0"),
    ({"replay": "x", "bench": "pgbench"}, "exclude each other"),
])
def test_own_options_refused(kw, said):
    with pytest.raises(InputError, match=said):
        check_own(opts(**kw))


def test_own_files_checked(tmp_path):
    with pytest.raises(InputError, match="No such file"):
        check_own(opts(script=str(tmp_path / "missing.sql")))
    (tmp_path / "empty.sql").write_text("")
    with pytest.raises(InputError, match="empty"):
        check_own(opts(script=str(tmp_path / "empty.sql")))
    with pytest.raises(InputError, match="not a regular file"):
        check_own(opts(script="/dev/null"))
    log = tmp_path / "app.log"
    log.write_text(STDERR)
    with pytest.raises(InputError, match="runs on copies only"):
        check_own(opts(replay=str(log), instance="main"))
    given = opts(replay=str(log))
    o = check_own(given)
    assert given.bench == "" and given.replay_hash is None  # a new value, the given unchanged
    assert o.bench == "replay" and o.replay_hash == file_hash(str(log), "--replay")
    assert len(o.replay_hash) == 12


def test_the_report_names_the_origins(tmp_path):
    sql = tmp_path / "orders.sql"
    sql.write_text("SELECT 1;\n")
    o = check_own(opts(script=str(sql), bench="pgbench", scale=5))
    target = type("T", (), {"source": None})()
    got = origins(o, target, None)
    assert got == {"workload_origin": f"script {sql} (sha256 {o.script_hash}) run by pgbench",
                   "data_origin": "generated by pgbench at scale 5"}
    lines = origin_lines({**got, "calibration": {"statements": 1200, "connections": 4,
                                                 "seconds": 2.5, "errors": 0}})
    assert lines[0] == f"workload origin: script {sql} (sha256 {o.script_hash}) run by pgbench"
    assert lines[2] == "TPS here: statements per second over each run's replay"
    assert "1,200 statements on 4 connections in 2.5 s, 0 with an error" in lines[3]


def test_a_capture_without_its_base_backup_is_not_called_a_log_file(tmp_path):
    from hpadvise.plugins.postgres.validate.sources import CopySource
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "capture.json").write_text('{"major": "15", "log": "statements.csv"}')
    with pytest.raises(InputError) as exc:
        CopySource(opts(replay=str(cap)))
    said = str(exc.value)
    assert "a capture without a base backup (--no-base)" in said and "log file" not in said
    assert "--instance ID --copy" in said


def test_a_stopped_cluster_named_by_its_data_directory_is_said_to_be_stopped(tmp_path,
                                                                            monkeypatch):
    import hpadvise.planning.pipeline
    from hpadvise.cli import capturing
    from hpadvise.api.engines import registry
    data = tmp_path / "15-main"
    data.mkdir()
    assert registry.get("postgres").not_running(str(data)) is None  # not a data directory
    (data / "PG_VERSION").write_text("15\n")
    assert registry.get("postgres").not_running(str(data)) == \
        f"the cluster in {data} is not running"
    # capture finds no running instance there (discovery sees running ones only)
    monkeypatch.setattr(capturing.os, "geteuid", lambda: 0)
    monkeypatch.setattr(hpadvise.planning.pipeline, "inspect",
                        lambda *a, **k: SimpleNamespace(instances=[], engines={}))
    with pytest.raises(InputError) as exc:
        capturing.capture(instance=str(data), output=str(tmp_path / "cap"), duration="20s",
                          db="postgres", no_base=False, journal_dir=None, yes=False)
    assert str(exc.value) == f"the cluster in {data} is not running; start it and capture again"
    with pytest.raises(InputError, match="no postgres instance"):  # nothing there at all
        capturing.capture(instance=str(tmp_path / "nothing"), output=str(tmp_path / "cap"),
                          duration="20s", db="postgres", no_base=False, journal_dir=None,
                          yes=False)
    assert not (tmp_path / "cap").exists()
