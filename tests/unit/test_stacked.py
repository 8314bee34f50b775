"""Stacked changes: refused over a killed capture or validate, allowed over an apply (layers),
and an older apply not rolled back before a newer one that changed its settings again."""

from __future__ import annotations

import time

import pytest

from hpadvise.ledger import journal as jr
from hpadvise.changes.actions import SysfsChoice
from hpadvise.kit.errors import InputError
from hpadvise.ledger.stacked import older_than_holders, refuse_stacked


def knob(tmp_path, name: str) -> SysfsChoice:
    p = tmp_path / name
    if not p.exists():
        p.write_text("always [madvise] never\n")
    return SysfsChoice(str(p))


def journal(d, command: str | None, actions, rolled_back=False) -> jr.Journal:
    header = {"argv": [command or "apply"]} | ({"command": command} if command else {})
    j = jr.Journal.create(str(d), header)
    for a in actions:
        j.done(j.intent(a, "madvise", "never"), "never")
    if rolled_back:
        j.mark_rolled_back([])
    time.sleep(1.01)  # journals are named by the second they start in
    return j


@pytest.mark.parametrize("holder", ["capture", "validate"])
def test_refused_over_a_killed_command_that_ends_itself(tmp_path, holder):
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    a = knob(tmp_path, "enabled")
    j = journal(d, holder, [a])
    for command in ("apply", "capture", "validate"):
        with pytest.raises(InputError) as e:
            refuse_stacked(str(d), [a], command)
        assert f"`hpadvise rollback {j.id}`" in str(e.value) and str(e.value).startswith(command)
    refuse_stacked(str(d), [knob(tmp_path, "defrag")], "apply")  # another setting: allowed


def test_rolled_back_or_apply_holders_allow_a_change(tmp_path):
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    a = knob(tmp_path, "enabled")
    journal(d, "validate", [a], rolled_back=True)
    journal(d, None, [a])  # an apply, active: a second apply layers over it
    refuse_stacked(str(d), [a], "apply")
    refuse_stacked(str(d), [a], "validate")


def test_an_older_apply_waits_for_the_newer_that_changed_its_settings(tmp_path):
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    a, b = knob(tmp_path, "enabled"), knob(tmp_path, "defrag")
    old = journal(d, None, [a])
    other = journal(d, None, [b])  # changes nothing of the first
    new = journal(d, None, [a, b])
    with pytest.raises(InputError) as e:
        older_than_holders(str(d), old)
    assert f"`hpadvise rollback {new.id}`" in str(e.value) and old.id in str(e.value)
    older_than_holders(str(d), new)  # the newest may go first
    new.mark_rolled_back([])
    older_than_holders(str(d), old)
    older_than_holders(str(d), other)
