"""Bad input on every command: one line on stderr saying what is wrong (and what to do), exit
2, no traceback, and nothing changed on the host (pools, THP, the persist root, the journal)."""

import concurrent.futures
import os

import pytest

from support import host_state, run_cli

pytestmark = pytest.mark.integration

NOT_A_SNAPSHOT = "/usr/share/doc"  # a directory that is not a snapshot


def _cases(tmp):
    j = f"--journal-dir={tmp}/journal"
    return [
        # check
        (["check", "--root", "/nonexistent"], "no such directory"),
        (["check", "--root", NOT_A_SNAPSHOT], "not a snapshot"),
        (["check", "--fail-on", "bogus"], "--fail-on"),
        (["check", "--measure-limits", "--root", "/tmp"], "--measure-limits measures the live"),
        (["check", "--profile", "nope"], "no profile named 'nope'"),
        (["check", "--profile", "/nonexistent/p.toml"], "p.toml"),
        (["check", "--db", "oracle"], "--db oracle"),
        (["check", "--db", "postgres,,oracle"], "--db oracle"),
        (["check", "--dsn", "redis://127.0.0.1:6379"], "redis://"),
        (["check", "--dsn", "nonsense"], "nonsense"),
        (["check", "--pgdata", "/nonexistent/data"], "/nonexistent/data"),
        (["check", "--nosuch"], "--nosuch"),
        (["check", "extra"], "extra"),
        (["check", "--dsn"], "--dsn"),
        # apply
        (["apply"], "--db"),
        (["apply", "--db", "oracle", "--dry-run"], "--db oracle"),
        (["apply", "--db", "postgres", "--instance", "nosuch", "--dry-run"], "nosuch"),
        (["apply", "--db", "postgres", "--profile", "nope", "--dry-run"], "nope"),
        (["apply", "--db", "postgres", "--instance", "5432", "--profile", "/etc/passwd",
          "--dry-run"], "/etc/passwd"),
        (["apply", "--db", "postgres", "--instance", "5432", j, "--persist-root",
          f"{tmp}/persist"], "--yes"),
        (["apply", "--db", "postgres", "--instance", "5432", j, "--persist-root",
          f"{tmp}/nosuch", "--yes"], "--persist-root"),
        (["apply", "--db", "postgres", "--bogus"], "--bogus"),
        # rollback and history
        (["rollback", "nosuch-id", j, "--yes"], "nosuch-id"),
        (["rollback", j, "--yes"], "nothing to roll back"),
        (["rollback", j], "--yes"),
        (["rollback", "--journal-dir", "/etc/passwd", "--yes"], "/etc/passwd"),
        (["history", "--journal-dir"], "--journal-dir"),
        (["history", "--bogus"], "--bogus"),
        # validate (all refused before anything is started or switched)
        (["validate", "--duration", "x"], "duration"),
        (["validate", "--duration", "0s"], "duration"),
        (["validate", "--db", "oracle"], "--db oracle"),
        (["validate", "--db", "all"], "one engine"),
        (["validate", "--db", "redis"], "redis"),
        (["validate", "--bench", "nope"], "--bench nope"),
        (["validate", "--workload", "nope"], "workload"),
        (["validate", "--variants", "current,nope"], "nope"),
        (["validate", "--variants", "current"], "two variants"),
        (["validate", "--clients", "abc"], "--clients"),
        (["validate", "--clients", "0"], "--clients"),
        (["validate", "--target-ci", "x"], "--target-ci"),
        (["validate", "--band", "-1%"], "--band"),
        (["validate", "--shared-buffers", "12QB"], "12QB"),
        (["validate", "--scratch", "--instance", "5432"], "exclude"),
        (["validate", "--scale", "0"], "--scale"),
        (["validate", "--swap-seconds", "nan"], "--swap-seconds"),
        (["validate", "--swap-seconds", "inf"], "--swap-seconds"),
        (["validate", "--band", "nan%"], "--band"),
        (["validate", "--target-ci", "inf"], "--target-ci"),
        (["validate", "--duration", "99999999999999h"], "more than a week"),
        (["validate", "--html", "/dev/null"], "character device"),
        # profiles: numbers that are no policy
        (["check", "--profile", f"{tmp}/nan.toml"], "headroom_pct"),
        (["check", "--profile", f"{tmp}/negative.toml"], "headroom_pct"),
        (["check", "--profile", f"{tmp}/floor.toml"], "os_floor_pct"),
        # a DSN for an engine --db leaves out, DSNs that cannot mean what was meant
        (["check", "--db", "postgres", "--dsn", "mysql://root@127.0.0.1:3306/"],
         "leaves mysql out"),
        (["check", "--dsn", "postgresql://app:pa/ss@127.0.0.1/db"], "percent-encode"),
        (["check", "--dsn", "postgresql://app:p@ss@127.0.0.1/db"], "percent-encode"),
        # output that is not a regular file
        (["check", "--output", "/dev/null"], "character device"),
        (["check", "--json", "--output", "/dev/full"], "character device"),
        (["history", "--output", f"{tmp}"], "a directory"),
        (["check", "--output", ""], "empty path"),
        (["snapshot", ""], "empty path"),
        # k8s
        (["k8s", "--pods", "0"], "--pods"),
        (["k8s", "--pods", "x"], "--pods"),
        (["k8s", "--db", "oracle"], "--db oracle"),
        (["k8s", "--db", "postgres", "--instance", "nosuch"], "nosuch"),
        # snapshot, engines, profiles, the command itself
        (["snapshot"], "DIRECTORY"),  # click names the argument by its metavar
        (["snapshot", "/etc"], "not an empty directory"),
        (["engines", "--bogus"], "--bogus"),
        (["profiles", "extra"], "extra"),
        (["nosuch"], "nosuch"),
    ]


def test_bad_input_is_one_line_exit_2_and_changes_nothing(knobs, tmp_path):
    os.makedirs(tmp_path / "journal", mode=0o700)
    (tmp_path / "persist").mkdir()
    for name, line in (("nan", "headroom_pct = nan"), ("negative", "headroom_pct = -50"),
                       ("floor", "os_floor_pct = 250")):
        (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\n[pool]\n{line}\n')
    cases = _cases(tmp_path)
    assert len(cases) >= 40
    before = host_state(persist_root=tmp_path / "persist")

    def judged(case) -> str | None:
        args, needle = case
        r = run_cli(*args, timeout=60)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr
              and lines[0].startswith("hpadvise: error: ") and needle in lines[0])
        return None if ok else f"{args}: rc {r.returncode}, stderr {r.stderr.strip()[-300:]!r}"
    # two at a time (each is refused before it acts, so none sees another's doing)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        failures = [f for f in pool.map(judged, cases) if f]
    assert not failures, "\n".join(failures)
    assert host_state(persist_root=tmp_path / "persist") == before
    assert os.listdir(tmp_path / "journal") == [] or \
        not any(n.endswith(".jsonl") for n in os.listdir(tmp_path / "journal"))
