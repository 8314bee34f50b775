"""The CLI as a user runs it, on captured hosts: tables, JSON schema, exit codes, bad input."""

from __future__ import annotations

import json
import shutil
from importlib import resources

import jsonschema
import pytest

from support import run_cli


def schema():
    return json.loads((resources.files("hpadvise") / "schemas" / "check-schema.json").read_text())


@pytest.mark.parametrize("state", ["no-pools", "pool-2m", "pool-1g", "thp-always", "thp-never",
                                   "pg-hugetlb", "pg-fallback"])
def test_json_matches_schema(hosts, state):
    r = run_cli("check", "--json", "--root", str(hosts / state))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    jsonschema.validate(d, schema())
    assert d["schema_version"] == 1


def test_tables_for_people(hosts):
    r = run_cli("check", "--root", str(hosts / "pg-fallback"), env={"COLUMNS": "160"})
    assert r.returncode == 0, r.stderr
    for title in ("Host", "Pools", "THP", "Instances", "Findings", "Plan"):
        assert f"\n{title}" in "\n" + r.stdout, title
    assert "fell back to normal pages silently" in r.stdout


def test_piped_tables_are_not_wrapped_at_80_columns(hosts, monkeypatch):
    # Through a pipe (CI logs, `| tee`) rich would assume 80 columns and wrap every cell.
    monkeypatch.delenv("COLUMNS", raising=False)
    r = run_cli("check", "--root", str(hosts / "pool-2m"))
    assert r.returncode == 0, r.stderr
    header = [ln for ln in r.stdout.splitlines() if "page size" in ln]
    assert header and "overcommit" in header[0] and "per node" in header[0]
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 120
    # and no line carries the padding rich fills a table's width with
    assert not [ln for ln in r.stdout.splitlines() if ln != ln.rstrip()], r.stdout[:800]


def test_every_help_ends_with_its_exit_codes():
    """One table (cli/exits.py) for every command, each command's help ending with its
    line: a command added without one fails here."""
    from hpadvise.cli.app import command_group
    from hpadvise.cli.exits import ANY, EXITS, exit_codes
    assert set(command_group().commands) == set(EXITS) == set(COMMANDS)
    for cmd in COMMANDS:
        r = run_cli(cmd, "--help")
        assert r.returncode == 0, r.stderr
        last = " ".join(r.stdout.strip().split("\n\n")[-1].split())  # the last paragraph
        assert last == f"Exit codes: {exit_codes(cmd)}", (cmd, last)
        # every command names 70 and 130 once (thp-exec: before it runs COMMAND)
        assert last.count("130 ") == 1 and last.count("70 a bug") == 1, last
        assert cmd == "thp-exec" or last.endswith(ANY) or "130 " in EXITS[cmd], last
        assert last.startswith("Exit codes: 0 ") or cmd == "thp-exec"
        assert "2 " in last, (cmd, last)


@pytest.mark.parametrize("cmd", ["check", "k8s", "apply", "validate", "capture"])
def test_db_completes_the_installed_engines(cmd):
    """bash completion (the script typer writes asks hpadvise for the words) offers the
    engines' names after --db."""
    from hpadvise.api.engines import registry
    r = run_cli(env={"COMP_WORDS": f"hpadvise {cmd} --db m", "COMP_CWORD": "3",
                     "_HPADVISE_COMPLETE": "complete_bash"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [n for n in registry.names() if n.startswith("m")] \
        and "mysql" in r.stdout, r.stdout


COMMANDS = ("check", "snapshot", "k8s", "apply", "rollback", "history", "validate", "capture",
            "size", "report", "probe", "engines", "profiles", "thp-exec", "man")


@pytest.mark.parametrize("cmd", COMMANDS)
def test_an_unknown_option_is_said_the_same_by_every_command(cmd):
    """`size` passes unknown options through as a JVM's flags: one given where an engine is
    due is still no such option, as everywhere else."""
    r = run_cli(cmd, "--bogus-opt")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"hpadvise: error: No such option: --bogus-opt (see: hpadvise {cmd} --help)"], r.stderr


def test_history_has_a_header_and_fixed_columns(tmp_path):
    """Journals whose ids differ in length (they end in the writer's PID): every column
    starts where its header does."""
    import time as _time
    for jid, status in (("20261127-194920-322", "ok"), ("20261127-194921-4194301", "failed")):
        (tmp_path / f"{jid}.jsonl").write_text("\n".join(json.dumps(r) for r in (
            {"type": "apply", "id": jid, "time": _time.time(), "argv": ["apply"],
             "instances": ["postgres:5432"]},
            {"type": "end", "status": status, "message": ""})) + "\n")
    r = run_cli("history", "--journal-dir", str(tmp_path / f"{jid}.jsonl"))  # a file
    assert r.returncode == 2 and "is not a directory" in r.stderr, r.stdout + r.stderr
    r = run_cli("history", "--journal-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    head, *rows = r.stdout.splitlines()
    assert head.split() == ["id", "time", "status", "state", "changes", "instances"], head
    assert len(rows) == 2 and "postgres:5432" in rows[0], r.stdout
    for word in ("time", "status", "state", "instances"):
        col = head.index(word)
        assert all(row[col - 1] == " " and row[col] != " " for row in rows), (word, r.stdout)


def test_fallback_is_reported_from_a_snapshot(hosts):
    d = json.loads(run_cli("check", "--json", "--root", str(hosts / "pg-fallback")).stdout)
    codes = {(f["code"], f["instance"]) for f in d["findings"]}
    tmp = [i for i in d["instances"] if i["id"] != "postgres:5432"][0]
    assert tmp["backing"] == "4k"
    assert ("pg.huge_pages.fallback", tmp["id"]) in codes
    d = json.loads(run_cli("check", "--json", "--root", str(hosts / "pg-hugetlb")).stdout)
    tmp = [i for i in d["instances"] if i["id"] != "postgres:5432"][0]
    assert tmp["backing"] == "hugetlb" and tmp["backing_page_kb"] == 2048
    assert tmp["demand"]["pages"]["2048"] == 72


def without_postgres(src, dst):
    """A copy of a captured host with its PostgreSQL processes taken out."""
    shutil.copytree(src, dst, symlinks=True)
    for p in (dst / "proc").iterdir():
        comm = p / "comm"
        if p.name.isdigit() and comm.exists() and comm.read_text().strip() == "postgres":
            shutil.rmtree(p)
    return dst


@pytest.mark.parametrize("fail_on,state,code", [
    ("none", "thp-always", 0),
    ("crit", "thp-always", 0),   # THP always: warn, not crit
    ("warn", "thp-always", 1),
    ("warn", "thp-never", 0),    # only info findings
    ("crit", "pg-fallback", 1),  # silent fallback: crit
])
def test_fail_on_exit_codes(hosts, tmp_path, fail_on, state, code):
    root = without_postgres(hosts / state, tmp_path / "root") if state.startswith("thp") \
        else hosts / state
    r = run_cli("check", "--json", "--fail-on", fail_on, "--root", str(root))
    assert r.returncode == code, r.stderr
    worst = json.loads(r.stdout)["summary"]["worst"]
    assert worst == {"thp-always": "warn", "thp-never": "info", "pg-fallback": "crit"}[state]


@pytest.mark.parametrize("args,msg", [
    (["--profile", "nope"], "no profile named 'nope'"),
    (["--db", "oracle"], "--db oracle: no such engine"),
    (["--fail-on", "sometimes"], "Invalid value for '--fail-on'"),
    (["--dsn", "postgresql://app@db1/x"], "--dsn connects to a running server and --root "
     "reads a snapshot, which holds none"),
])
def test_usage_errors_exit_2_with_one_line(hosts, args, msg):
    r = run_cli("check", "--root", str(hosts / "no-pools"), *args)
    assert r.returncode == 2
    assert msg in r.stderr
    assert "Traceback" not in r.stderr


def test_an_empty_dsn_is_bad_input():
    r = run_cli("check", "--dsn", " ")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["hpadvise: error: --dsn is empty: give a DSN "
                                             "(postgresql://user@host:5432/db, "
                                             "mysql://user@host:3306/), or leave the option "
                                             "out"], r.stderr


def test_an_offline_audit_is_not_told_to_pass_a_dsn(hosts):
    """A snapshot takes no --dsn: what it cannot read is said without advising one."""
    r = run_cli("check", "--json", "--root", str(hosts / "mariadb-jvm"))
    said = [f for f in json.loads(r.stdout)["findings"]
            if f["code"] in ("pg.no_connection", "my.no_connection")]
    assert said and all("--dsn" not in f["rationale"] and "A snapshot holds no connection"
                        in f["rationale"] for f in said), said


def test_bad_profile_file(hosts, tmp_path):
    p = tmp_path / "p.toml"
    p.write_text('name = "x"\n[pool]\nheadroom_pct = "lots"\n')
    r = run_cli("check", "--root", str(hosts / "no-pools"), "--profile", str(p))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "pool.headroom_pct must be a number" in r.stderr


def test_help_has_examples():
    r = run_cli("check", "--help")
    assert r.returncode == 0 and "hpadvise check --json --fail-on warn" in r.stdout


def _schema(name):
    return json.loads((resources.files("hpadvise") / "schemas" / f"{name}-schema.json").read_text())


def test_engines_json_matches_its_schema():
    r = run_cli("engines", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    jsonschema.validate(d, _schema("engines"))
    assert {"postgres", "mysql", "jvm"} <= {e["name"] for e in d}


def test_the_engines_table_says_what_check_finds_of_each():
    rows = {e["name"]: e for e in json.loads(run_cli("engines", "--json").stdout)}
    text = " ".join(run_cli("engines", env={"COLUMNS": "1000"}).stdout.split())
    assert "check finds" in text
    for name, e in rows.items():
        finds = f"{' or '.join(e['processes'])} processes; {e['finding_codes']} kinds of finding"
        assert finds in text, (name, finds, text)


def test_the_engines_apply_column_is_in_words_not_journal_kinds():
    """What apply changes, said as a user says it: the journal's action kinds (capture's
    among them, which apply never takes) are not shown; the engines that change their
    server name the setting they change."""
    from hpadvise.api.engines import registry
    rows = {e["name"]: e for e in json.loads(run_cli("engines", "--json").stdout)}
    kinds = {k.kind for eng in registry.all() for k in type(eng).action_kinds}
    assert "pg_capture_dir" in kinds
    for name, e in rows.items():
        assert not any(k in e["apply"] for k in kinds), (name, e["apply"])
    assert "huge_pages" in rows["postgres"]["apply"] and "Patroni" in rows["postgres"]["apply"]
    assert "large_pages" in rows["mysql"]["apply"]


@pytest.mark.parametrize("state", ["pg-fallback", "mariadb-jvm", "pg-patroni", "mthp-always"])
def test_a_narrow_terminal_breaks_lines_at_spaces_never_inside_a_word(hosts, state):
    """Rich would break a path, a version or a kernel option inside it to fit 60 columns;
    what a user copies from the report must stay whole, so the words are the same as on a
    wide terminal, only the lines break elsewhere (the tables' rules aside)."""
    def words(columns: str) -> set[str]:
        r = run_cli("check", "-v", "--root", str(hosts / state), env={"COLUMNS": columns})
        assert r.returncode in (0, 1), r.stderr
        return {w for w in r.stdout.split() if w.strip("─━")}
    narrow, wide = words("60"), words("400")
    assert narrow == wide, (sorted(narrow - wide), sorted(wide - narrow))


def test_every_output_schema_is_a_valid_schema():
    for name in ("check", "apply", "engines", "validate"):
        jsonschema.Draft202012Validator.check_schema(_schema(name))


def test_version_and_case_insensitive_choices(hosts):
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("hpadvise ")
    r = run_cli("check", "--root", str(hosts / "pg-fallback"), "--fail-on=CRIT",
                "--format=JSON", "--db", "Postgres,MARIADB")
    assert r.returncode == 1, r.stderr  # the fallback is crit
    assert {i["engine"] for i in json.loads(r.stdout)["instances"]} <= {"postgres", "mysql"}


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--format", "prometheus"]])
def test_a_closed_pipe_is_no_failure(hosts, fmt):
    """`hpadvise check | head -1` under `set -o pipefail`: the reader leaves early, hpadvise
    exits 0 and says nothing on stderr (exit 1 would read as a finding)."""
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-m", "hpadvise.cli", "check", "--root",
                          str(hosts / "pg-fallback"), *fmt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(20)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait() == 0 and err == "", err


def test_fail_on_says_which_findings_tripped_it(hosts):
    r = run_cli("check", "--json", "--fail-on", "crit", "--root", str(hosts / "pg-fallback"))
    assert r.returncode == 1
    assert "--fail-on crit:" in r.stderr and "pg.huge_pages.fallback" in r.stderr
    r = run_cli("check", "--json", "--fail-on", "crit", "--db", "jvm", "--root",
                str(hosts / "no-pools"))  # nothing at crit there
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_every_reporting_command_writes_json_to_a_file(hosts, tmp_path):
    """One vocabulary: --json (--format json) and --output FILE on every command that
    reports; the file is the JSON, stdout stays empty."""
    check = tmp_path / "host.json"
    r = run_cli("check", "--json", "--root", str(hosts / "pool-2m"), "--output", str(check))
    assert r.returncode == 0 and r.stdout == "", r.stderr
    for args in (["engines"], ["profiles"], ["report", str(check)],
                 ["history", "--journal-dir", str(tmp_path / "journal")]):
        out = tmp_path / f"{args[0]}.json"
        (tmp_path / "journal").mkdir(exist_ok=True)
        r = run_cli(*args, "--json", "--output", str(out))
        assert r.returncode == 0 and r.stdout == "", (args, r.stderr)
        assert isinstance(json.loads(out.read_text()), list), args


def test_help_examples_paste_whole(hosts):
    """Examples are kept as written at any width: a pasted line is a whole command."""
    r = run_cli("check", "--help", env={"COLUMNS": "60"})
    assert "  hpadvise check --format prometheus --output " \
           "/var/lib/prometheus/node-exporter/hpadvise.prom\n" in r.stdout
    assert "--output FILE" in r.stdout and "--root DIR" in r.stdout


def _schema(name):
    return json.loads((resources.files("hpadvise") / "schemas" / f"{name}-schema.json").read_text())


def test_outputs_match_their_schemas(hosts, tmp_path):
    """Every JSON output has a shipped schema, and real outputs validate against it: report
    (one row per host: two reports of one host give one row, the newer), history, profiles,
    engines."""
    import os
    import time
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    for f, at in ((a, "2026-11-27T10:00:00Z"), (b, "2026-11-26T10:00:00Z")):  # one host
        r = run_cli("check", "--json", "--root", str(hosts / "pool-2m"))
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        d["host"]["hostname"], d["checked_at"] = "db1", at
        f.write_text(json.dumps(d))
    # a copied old report is newer by its file's time: the check's own time wins
    os.utime(a, (time.time() - 60, time.time() - 60))
    rows = json.loads(run_cli("report", str(a), str(b), "--json").stdout)
    jsonschema.validate(rows, _schema("report"))
    assert [(x["source"], x["checked_at"], x["time_from"]) for x in rows] == [
        (str(a), "2026-11-27T10:00:00Z", "check")]
    row = rows[0]
    assert row["pool_short"] or row["pool_unused"]  # the numbers, not only the prose
    assert row["pool"] == "; ".join(
        [f"short by {n} x 2 MiB" for n in row["pool_short"].values()] +
        [f"{n} x 2 MiB unused" for n in row["pool_unused"].values()])
    (tmp_path / "j").mkdir()
    for cmd, name in ((["history", "--journal-dir", str(tmp_path / "j")], "history"),
                      (["profiles"], "profiles"), (["engines"], "engines")):
        r = run_cli(*cmd, "--json")
        assert r.returncode == 0, r.stderr
        jsonschema.validate(json.loads(r.stdout), _schema(name))


def test_report_puts_failed_checks_first_and_says_what_to_set(hosts, tmp_path):
    """A host whose check failed (exit 2) comes first with its error, before worse hosts;
    each row names the worst findings and the pool and THP values to set; one host is
    '1 host'."""
    r = run_cli("check", "--json", "--root", str(hosts / "thp-always"))
    d = json.loads(r.stdout)
    (tmp_path / "thp.json").write_text(r.stdout)
    d["host"]["hostname"], d["errors"] = "db9", ["cannot tell the data directory of postmaster 7"]
    d["findings"], d["summary"] = [], {"worst": "ok", "counts": {}}
    (tmp_path / "failed.json").write_text(json.dumps(d))
    rows = json.loads(run_cli("report", str(tmp_path), "--json").stdout)
    assert [x["error"] for x in rows] == ["cannot tell the data directory of postmaster 7", None]
    thp = rows[1]
    assert "THP enabled = madvise" in thp["to_set"] and any(
        s.startswith("2 MiB pool = ") for s in thp["to_set"]), thp["to_set"]
    assert thp["worst"] == "crit" and thp["worst_findings"] and all(
        "fell back" in f or "silently" in f for f in thp["worst_findings"])
    out = run_cli("report", str(tmp_path), env={"COLUMNS": "200"}).stdout
    lines = out.splitlines()
    assert lines[0] == "2 hosts (1 failed): failed and partial checks first, then worst first"
    assert lines[2].split()[:4] == ["db9", "check", "failed:", "cannot"], out
    assert "THP enabled = madvise" in out and "huge_pages = try fell back" in out
    one = run_cli("report", str(tmp_path / "thp.json")).stdout
    assert one.splitlines()[0] == "1 host", one


def test_report_html_to_a_directory_is_named_and_refused_first(tmp_path):
    """--html names a directory: one line that names --html, exit 2, before any report is
    read (a path that is not a report would otherwise be what it complains about)."""
    r = run_cli("report", str(tmp_path / "nothing-here"), "--html", str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--html" in r.stderr and str(tmp_path) in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_code_list_is_open_to_third_party_engines(hosts):
    r = run_cli("check", "--json", "--root", str(hosts / "pg-fallback"))
    d = json.loads(r.stdout)
    d["findings"].append(dict(d["findings"][0], code="mydb.buffers.fallback"))
    jsonschema.validate(d, schema())
    d["findings"][-1]["code"] = "Not A Code"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, schema())
