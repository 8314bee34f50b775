"""Each region's page size as the JDK chooses it (flags.layout), against the counts measured on
JDK 11, 17, 21 and 25 here (docs/reference.md): G1 beside ZGC, whose heap takes 2 MiB pages
whatever the large page size."""

from hpadvise.plugins.jvm.flags import JvmFlags, layout, split

MiB, GiB = 1 << 20, 1 << 30
BOTH = (2048, 1048576)


def test_g1_heap_on_1g_pages_the_rest_on_2m():
    f = JvmFlags(xmx=GiB, xms=GiB, large_pages=True, large_page_size=GiB)
    assert split(layout(f, GiB, 17, 1048576, BOTH)) == {1048576: 1, 2048: 139}
    assert split(layout(f, GiB, 21, 1048576, BOTH)) == {1048576: 1, 2048: 130}
    assert split(layout(f, GiB, 11, 1048576, BOTH)) == {2048: 651}  # 11 keeps 2 MiB


def test_zgc_heap_on_2m_pages_only():
    f = JvmFlags(xmx=GiB, xms=GiB, large_pages=True, gc="Z")
    for major in (11, 17, 21, 25):
        regions = layout(f, GiB, major, 2048, BOTH)
        assert [(w, kb) for w, _, kb in regions] == [("heap", 2048), ("code cache", 2048)]
        assert split(regions) == {2048: 512 + 120}
        # a 1 GiB large page size changes nothing: ZGC takes 2 MiB (and refuses to start)
        assert split(layout(f, GiB, major, 1048576, BOTH)) == {2048: 632}
    # rounded up to its 2 MiB granules; no 2 MiB pool: the heap stays on 4 KiB pages
    odd = layout(f, 1001 * MiB, 21, 2048, BOTH)
    assert odd[0] == ("heap", 1002 * MiB, 2048)
    assert layout(f, GiB, 21, 1048576, (1048576,))[0] == ("heap", GiB, None)


def _flags(*args):
    f = JvmFlags()
    for a in args:
        f.apply(a)
    return f


def test_sysv_large_pages_as_hotspot_chooses_them():
    """-XX:+UseSHM puts large pages in SysV shared memory up to JDK 21 (turning them on by
    itself), unless they are off, on THP, or hugetlbfs (tried first) takes them; its code cache
    then stays on 4 KiB pages (measured on 17.0.15)."""
    from hpadvise.plugins.jvm.flags import sysv_large_pages
    assert sysv_large_pages(_flags("-XX:+UseSHM"), 17)
    assert sysv_large_pages(_flags("-XX:+UseLargePages", "-XX:+UseSHM"), 21)
    assert not sysv_large_pages(_flags("-XX:+UseLargePages", "-XX:+UseSHM"), 22)
    assert not sysv_large_pages(_flags("-XX:-UseLargePages", "-XX:+UseSHM"), 17)
    assert not sysv_large_pages(_flags("-XX:+UseSHM", "-XX:+UseHugeTLBFS"), 17)
    assert not sysv_large_pages(_flags("-XX:+UseSHM", "-XX:+UseTransparentHugePages"), 17)
    assert not sysv_large_pages(_flags("-XX:+UseSHM"), None)
    f = _flags("-XX:+UseLargePages", "-XX:+UseSHM", "-Xmx256m")
    regions = {w: kb for w, _, kb in layout(f, 256 << 20, 17, 2048, (2048, 1048576))}
    assert regions["heap"] == 2048 and regions["code cache"] is None
    f = _flags("-XX:+UseLargePages", "-Xmx256m")
    assert dict((w, kb) for w, _, kb in layout(f, 256 << 20, 17, 2048, (2048,)))[
        "code cache"] == 2048
