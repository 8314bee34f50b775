"""1 GiB pages at runtime where free memory is not initialised yet: apply makes a transient
pool of 2 MiB pages (journaled), releases it and asks again. On this real kernel and pools:
the transient pool is really made and really released, journaled so that rollback would undo
a kill in between, and the gigantic pool is asked again."""

import dataclasses
from pathlib import Path

import pytest

from hpadvise.facts import host
from hpadvise.ledger import journal
from hpadvise.changes.actions import Pool
from hpadvise.changes.gigantic import pull_in, transient_pages
from hpadvise.facts.sysroot import SysRoot
from gigantic import NoGiganticPages

pytestmark = [pytest.mark.integration, pytest.mark.live]

P2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


def lazily_initialised(facts):
    """These facts as a freshly booted host with 4 GiB of free memory not listed yet would
    show them (MemFree 4 GiB above what buddyinfo lists); the pools are the real ones. MemFree
    is set from buddyinfo's own total: the two are read at different moments and per-CPU lists
    make them differ by some pages either way."""
    mem = dataclasses.replace(facts.mem, free_kb=listed_kb(facts) + (4 << 20))
    return dataclasses.replace(facts, mem=mem)


def listed_kb(facts):
    return sum(z.free_bytes_at_order(0, facts.base_page_bytes) for z in facts.buddy) // 1024


def test_transient_pool_then_ask_again(knobs, tmp_path):
    facts = host.collect(SysRoot("/"))
    if facts.pool(1048576) is None:
        pytest.skip("no 1 GiB pages on this host (hugepages-1048576kB)")
    lazy = lazily_initialised(facts)
    assert lazy.unlisted_free_bytes == 4 << 30
    n = transient_pages(lazy, 2048, 1, 1048576)
    assert n >= 2 * 512  # the missing GiB and one more, at least
    d = tmp_path / "j"
    journal.open_dir(str(d))
    j = journal.Journal.create(str(d), {"argv": ["test"]})
    big = Pool(1048576)
    said = []
    with NoGiganticPages() as held:  # no aligned free GiB anywhere: the retry falls short
        if held.why:
            pytest.skip(held.why)
        got = pull_in(lazy, big, 1, j, said.append)
    assert got == 0 and int(Path(P2M).read_text()) == 0
    assert "pulls it in" in said[0] and "made and released" in said[1]
    made = int(said[1].split(" x ")[0].rsplit(" ", 1)[-1])
    assert made > 0  # the 2 MiB pages really were allocated, then given back
    [e] = journal.Journal.load(j.path).entries
    assert e.spec["kind"] == "pool" and e.spec["size_kb"] == 2048 and e.old == 0
    assert e.done and e.actual == 0
    # where all free memory is listed, nothing transient is made: it would only squeeze the
    # page cache
    said.clear()
    real = dataclasses.replace(facts, mem=dataclasses.replace(facts.mem, free_kb=listed_kb(facts)))
    assert real.unlisted_free_bytes == 0
    pull_in(real, big, 1, j, said.append)
    assert not said and len(journal.Journal.load(j.path).entries) == 1
    big.set(0)
