"""A boot-time knob's identity: one type, one spelling, one parser (kit/knob_id.py); no
other module builds or takes apart a knob's key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpadvise.kit.knob_id import KnobId, size_dir, size_of_dir

REPO = Path(__file__).resolve().parents[2]
# a key written, its prefix tested, a knob's string sliced, a size directory spelled or matched
SPELLED = re.compile(
    r"""f?["'](pool|thp)\.(\{|\d|enabled|defrag|shmem_enabled|hugepages|["'])"""
    r"""|startswith\(\(?["'](pool|thp)\."""
    r"""|knob\w*\[\d*:-?\d*\]|\[10:-2\]"""
    r"""|hugepages-\{(?!k8s)|hugepages-\(\\d|hugepages-\\d""")


@pytest.mark.parametrize("k,key,path", [
    (KnobId.pool(2048), "pool.2048", None),
    (KnobId.pool(1048576), "pool.1048576", None),
    (KnobId.thp("enabled"), "thp.enabled", "enabled"),
    (KnobId.thp("defrag"), "thp.defrag", "defrag"),
    (KnobId.thp("shmem_enabled"), "thp.shmem_enabled", "shmem_enabled"),
    (KnobId.thp("enabled", 64), "thp.hugepages-64kB/enabled", "hugepages-64kB/enabled"),
    (KnobId.thp("shmem_enabled", 2048), "thp.hugepages-2048kB/shmem_enabled",
     "hugepages-2048kB/shmem_enabled"),
    (KnobId.sysctl("vm.zone_reclaim_mode"), "sysctl.vm.zone_reclaim_mode", None),
])
def test_every_knob_spells_its_key_and_its_path_reads_back(k, key, path):
    """The key is written (check's JSON), never read back; a THP knob's path under
    transparent_hugepage/ is read back from scripts and TuneD's [sysfs]."""
    assert k.key == str(k) == key
    if path is None:
        assert not k.per_size and k.kind != "thp"
        with pytest.raises(ValueError):
            k.thp_path
    else:
        assert k.thp_path == path and KnobId.of_thp_path(path) == k
        assert k.per_size == (k.page_kb is not None)


def test_knobs_are_values():
    """Equal knobs are one key in a dict, whichever constructor made them."""
    assert KnobId.thp("enabled", 64) == KnobId.of_thp_path("hugepages-64kB/enabled")
    assert len({KnobId.pool(2048), KnobId("pool", 2048), KnobId.thp("enabled")}) == 2


def test_paths_under_transparent_hugepage_that_no_plan_sets_are_no_knob():
    for rest in ("khugepaged/defrag", "hugepages-64kB/defrag", "use_zero_page",
                 "hugepages-64kB", "hugepages-xkB/enabled"):
        assert KnobId.of_thp_path(rest) is None, rest


def test_the_size_directory_both_ways():
    assert size_dir(2048) == "hugepages-2048kB" and size_of_dir("hugepages-2048kB") == 2048
    assert size_of_dir("hugepages-2048kB.old") is None and size_of_dir("nr_hugepages") is None


def test_no_other_module_spells_or_slices_a_key():
    """Keys and the kernel's size directories are built and read through knob_id only: no
    other module of the product writes a key ("pool.2048", "thp.defrag", f"thp.{...}"),
    tests one's prefix, slices a knob's string, or spells or matches hugepages-<kB>kB.
    Finding codes share the prefixes ("thp.enabled" is a code too): lines that name a code
    (CORE[...], CODES[...], .code, Code(...)) and the code catalog are not keys."""
    offenders = []
    for top in ("advisor", "plugins", "benchmarks"):
        for f in (REPO / top).rglob("*.py"):
            if f.name in ("knob_id.py", "findings.py"):
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if SPELLED.search(line) and not any(c in line for c in (
                        "CORE[", "CODES[", ".code", "Code(")):
                    offenders.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


# a key read back, or a boot setter's words taken apart for its file, plugin or kind
READ_BACK = re.compile(r"KnobId\.parse"
                       r"|\.key(\[|\.(split|rpartition|partition|startswith|removeprefix)\b)"
                       r"|\bsource\.(split|rsplit|partition|rpartition|startswith|endswith"
                       r"|removeprefix)\(")


def test_no_module_reads_a_key_or_a_setters_words_back():
    """Code passes KnobIds, and a boot setter's file, TuneD plugin and re-application as
    fields (facts/boot.py Setter): its `source` is words for people, never taken apart."""
    offenders = [f"{f.relative_to(REPO)}:{n}: {line.strip()}"
                 for top in ("advisor", "plugins", "benchmarks") for f in (REPO / top).rglob("*.py")
                 for n, line in enumerate(f.read_text().splitlines(), 1) if READ_BACK.search(line)]
    assert offenders == []
    for old in ('k = KnobId.parse(knob)', 'path = s.source.split(":")[0]',
                'if s.source.endswith("(re-applied by TuneD)"):', 'knob.key.startswith("thp.")'):
        assert READ_BACK.search(old), old


def test_the_guard_above_catches_what_it_forbids():
    """The forms the old code used, each caught by the guard's pattern."""
    for old in ('s = b.at_boot(f"thp.hugepages-{kb}kB/{k}")', 'knob = "thp.enabled"',
                'return f"pool.{default_kb or 2048}"', 'if knob.startswith("pool."):',
                'return host.thp.mthp.get(int(kb[10:-2]), {})', 'x = knob[4:]',
                'name = f"hugepages-{kb}kB/{knob}"', 're.fullmatch(r"hugepages-(\\d+)kB", n)'):
        assert SPELLED.search(old), old
    assert not SPELLED.search('f"hugepages-{k8s_quantity(page_kb * 1024)}"')


@pytest.mark.parametrize("text,chosen,words,bracketed", [
    ("always [madvise] never\n", "madvise", ("always", "madvise", "never"), True),
    ("always defer defer+madvise [madvise] never", "madvise",
     ("always", "defer", "defer+madvise", "madvise", "never"), True),
    ("always within_size advise [never] deny force", "never",
     ("always", "within_size", "advise", "never", "deny", "force"), True),
    ("1\n", "1", ("1",), False),
    ("always never", None, ("always", "never"), False),
    ("", None, (), False),
])
def test_the_choice_format_has_one_parser(text, chosen, words, bracketed):
    from hpadvise.kit.knob_id import read_choice
    c = read_choice(text)
    assert (c.chosen, c.words, c.bracketed) == (chosen, words, bracketed)


def test_no_other_module_parses_the_choice_format():
    offenders = [f"{f.relative_to(REPO)}" for top in ("advisor", "plugins", "benchmarks")
                 for f in (REPO / top).rglob("*.py") if f.name != "knob_id.py"
                 and 'strip("[]") for w in' in f.read_text()]
    assert offenders == []
