"""What a newcomer reads in the first hour says exactly what happened, in the tool's words:
a check narrowed to one engine says which engine it found none of; a pool of one spare page
is one page; a plan larger than the host's memory says by how much, never a negative size
"left"; a release not read is "unknown" in tables, never "?"; a journal directory that does not
exist is an error (exit 2), not an empty history."""

import json
import shutil

import pytest

from support import run_cli


def _findings(r) -> dict[str, str]:
    return {f["code"]: f["title"] for f in json.loads(r.stdout)["findings"]}


def test_a_narrowed_check_names_the_engine_it_found_none_of(hosts):
    r = run_cli("check", "--root", str(hosts / "no-pools"), "--db", "mysql", "--json")
    assert r.returncode in (0, 1), r.stderr
    assert _findings(r)["instances.none"] == "No mysql instance found"


def test_one_spare_page_is_one_page(hosts):
    r = run_cli("check", "--root", str(hosts / "pool-1g"), "--json")
    assert r.returncode in (0, 1), r.stderr
    assert _findings(r)["pool.unused"] == \
        "1 reserved 1 GiB page (1 GiB) is used by nothing found"
    r = run_cli("check", "--root", str(hosts / "pg-cgroup-v2"), "--json")
    assert _findings(r)["pool.unused"].startswith("55 reserved 2 MiB pages (110 MiB) are ")


def test_a_plan_beyond_the_hosts_memory_says_by_how_much(hosts):
    if not (shutil.which("mariadbd") or shutil.which("mysqld")):  # size asks the server
        pytest.skip("no MariaDB/MySQL server binary (mariadbd, mysqld) for size to check "
                    "the settings with")
    r = run_cli("size", "--root", str(hosts / "no-pools"), "mysql",
                "innodb_buffer_pool_size=200G", env={"COLUMNS": "300"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "more than this host's memory (23.5 GiB)" in r.stdout, r.stdout
    assert "leave -" not in r.stdout and " -1" not in r.stdout and " -2" not in r.stdout


def test_an_unread_release_is_unknown_in_the_table(hosts):
    r = run_cli("check", "--root", str(hosts / "zgc-thp"), env={"COLUMNS": "200"})
    row = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("jvm:"))
    assert row.split()[1] == "unknown" and "?" not in row, row


def test_history_of_a_journal_directory_that_does_not_exist(tmp_path):
    r = run_cli("history", "--journal-dir", str(tmp_path / "nosuch"))
    assert r.returncode == 2 and "no such directory" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout
    r = run_cli("history", "--journal-dir", str(tmp_path))  # there, and empty: none
    assert r.returncode == 0 and "no applies recorded" in r.stdout


def test_report_of_a_file_cut_short_says_where_in_words(tmp_path):
    (tmp_path / "cut.json").write_text('{"schema_version": 1, "host": ')
    r = run_cli("report", str(tmp_path / "cut.json"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not JSON from line 1, column 31" in r.stderr and "Expecting" not in r.stderr


def test_every_manual_page_names_the_short_help_option():
    r = run_cli("man", "check")
    assert r.returncode == 0 and "-h, --help" in r.stdout, r.stdout[-500:]
