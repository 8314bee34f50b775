"""The order the host's worker runs its tests in (tests/hostlock.py): the budgeted files first,
each file's tests together and in their own order, the contained tests untouched."""

from pathlib import Path

import hostlock

TESTS = Path(__file__).resolve().parents[1]


def test_every_budgeted_file_exists_owns_the_host_and_runs_validate_on_a_budget():
    for f in hostlock.BUDGETED_FIRST:
        path = TESTS.parent / f
        assert path.is_file(), f"{f} is listed as budgeted but does not exist"
        assert not hostlock.contained(f + "::test_x"), f"{f} is contained: it runs beside anyway"
        assert '"--duration"' in path.read_text(), f"{f} gives no validate run a --duration"


def test_the_budgeted_files_go_first_and_every_file_keeps_its_order():
    files = sorted(str(p.relative_to(TESTS.parent))
                   for p in (TESTS / "integration").glob("test_*.py"))
    ids = [f"{f}::test_{i}" for f in files for i in (1, 2, 3)]
    ordered = sorted(ids, key=hostlock.run_order)
    n = 3 * len(hostlock.BUDGETED_FIRST)
    assert {i.split("::")[0] for i in ordered[:n]} == set(hostlock.BUDGETED_FIRST)
    assert not {i.split("::")[0] for i in ordered[n:]} & set(hostlock.BUDGETED_FIRST)
    for f in files:
        assert [i for i in ordered if i.startswith(f + "::")] == [f"{f}::test_{i}"
                                                                  for i in (1, 2, 3)]
    assert ordered[n:] == [i for i in ids if hostlock.run_order(i)]
