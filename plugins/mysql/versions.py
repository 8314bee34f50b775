"""Which MySQL and MariaDB releases put which buffers on large pages, and how.

Each fact is one `Rule`: the releases it holds for, what it says, where it comes from, and
whether it was measured on a server here or modelled from the server's source and manual.
`model(flavour, version)` gathers the rules of one release into a `Model` that sizing, the
findings and `size` read; nothing else in the engine compares version numbers for large pages.
docs/reference.md lists the same rules for people.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Version = tuple[int, ...]
Span = tuple[Version, Version]  # [from, up to but not including)
ANY: tuple[Span, ...] = (((0,), (999,)),)
MEASURED = (10, 11, 19)  # the MariaDB release the measured rules come from (Debian 12's)
MEASURED_MYSQL = (9, 7, 4)  # the MySQL release measured here (Debian sid's, in its own root)


@dataclass(frozen=True)
class Rule:
    key: str
    flavour: str  # "mariadb" | "mysql"
    spans: tuple[Span, ...]
    says: str
    source: str
    measured: bool = False  # measured on a server here (docs/reference.md), not only read

    def holds(self, flavour: str, v: Version | None) -> bool:
        return flavour == self.flavour and v is not None and \
            any(lo <= v < hi for lo, hi in self.spans)


RULES: tuple[Rule, ...] = (
    # --- MariaDB ---
    Rule("sysv", "mariadb", (((0,), (10, 5)),),
         "large pages through SysV shared memory (shmget SHM_HUGETLB), default page size only",
         "mysys/my_largepage.c before MDEV-18851"),
    Rule("mmap", "mariadb", (((10, 5), (999,)),),
         "large pages through mmap(MAP_HUGETLB), the largest page size each buffer can use "
         "several of; no memlock limit or hugetlb_shm_group needed",
         "MDEV-18851 (10.5); measured under ulimit -l 0", measured=True),
    Rule("sizes_sys", "mariadb", (((10, 5), (999,)),),
         "the huge page sizes are read from the directory /sys/kernel/mm/hugepages at start; "
         "where the server cannot see it (a root or container without /sys) it uses no large "
         "pages at all, and logs nothing",
         "mysys/my_largepage.c my_get_large_page_sizes, my_large_virtual_alloc; measured on "
         "11.8.9 in a root without /sys: 0 huge pages of 700 free, no log line", measured=True),
    Rule("chunks", "mariadb", (((0,), (10, 11, 12)), ((11, 0), (11, 4, 6)),
                               ((11, 5), (11, 8, 2))),
         "one mapping per buffer pool chunk (chunk + its block descriptors); a chunk that "
         "cannot be mapped falls back alone",
         "storage/innobase/buf/buf0buf.cc buf_chunk_init"),
    Rule("chunk_autosize", "mariadb", (((10, 8), (10, 11, 12)), ((11, 0), (11, 4, 6)),
                                       ((11, 5), (11, 8, 2))),
         "innodb_buffer_pool_chunk_size 0 (the default) is innodb_buffer_pool_size / 64, "
         "rounded down to the large page size, at least 1 MiB",
         "MDEV-25342 (10.8); MariaDB docs, innodb_buffer_pool_chunk_size"),
    Rule("single_pool", "mariadb", (((10, 11, 12), (10, 12)), ((11, 4, 6), (11, 5)),
                                    ((11, 8, 2), (999,))),
         "the buffer pool is one mapping; with large pages innodb_buffer_pool_size_max is "
         "innodb_buffer_pool_size rounded up to 8 MiB whatever it is set to (or its 8 TiB "
         "default, MDEV-38671), and the pool cannot be resized online (ERROR 1621, \"use SET "
         "large_pages=0\")",
         "MDEV-29445 (10.11.12, 11.4.6, 11.8.2, 12.0); measured on 10.11.19: size_max 1G and 8G "
         "left 300M mapped as 300 + 4 MiB", measured=True),
    Rule("log_buffers", "mariadb", (((10, 8), (999,)),),
         "two InnoDB log buffers of innodb_log_buffer_size (log_sys.buf and flush_buf) on "
         "large pages, none with innodb_log_file_mmap = ON",
         "storage/innobase/log/log0log.cc; measured on 10.11.19", measured=True),
    Rule("log_buffers_old", "mariadb", (((10, 5), (10, 8)),),
         "the InnoDB log buffers on large pages, counted as two of innodb_log_buffer_size "
         "(an upper bound: the layout before 10.8 is not measured)",
         "storage/innobase/log/log0log.cc"),
    Rule("io_uring", "mariadb", (((10, 6), (999,)),),
         "io_uring maps 0-6 MiB more huge pages at some starts (innodb_use_native_aio = ON): "
         "counted as an allowance",
         "measured on 10.11.19", measured=True),
    Rule("caches", "mariadb", ANY,
         "the MyISAM key cache (one mapping per segment) and the Aria page cache on large pages",
         "mysys/mf_keycache.c, storage/maria/ma_pagecache.c; measured on 10.11.19",
         measured=True),
    Rule("instances_one", "mariadb", (((10, 5), (999,)),),
         "one buffer pool instance whatever innodb_buffer_pool_instances says",
         "MDEV-15058 (10.5)"),
    # --- MySQL (Oracle) ---
    Rule("sysv", "mysql", (((0,), (8,)),),
         "large pages through SysV shared memory (shmget SHM_HUGETLB), default page size only",
         "storage/innobase/os/os0proc.cc os_mem_alloc_large; MySQL 5.7 manual, Enabling "
         "Large Page Support"),
    Rule("chunks", "mysql", ANY,
         "one mapping per buffer pool chunk (chunk + block descriptors, plus a 4 KiB header "
         "with ut::malloc_large_page; earlier 8.0 releases used SysV shmget in "
         "os_mem_alloc_large, which the server's mappings show), rounded up to the default huge "
         "page size; a chunk that cannot be mapped falls back alone, with a warning each in the "
         "error log",
         "storage/innobase/buf/buf0buf.cc allocate_chunk; storage/innobase/include/detail/ut/"
         "large_page_alloc.h, large_page_alloc-linux.h"),
    Rule("descriptor_504", "mysql", (((8, 0), (999,)),),
         "a chunk's block descriptors take at most 504 bytes per 16 KiB page: measured on "
         "9.7.4, each 128 MiB chunk is mapped as 132 MiB (66 pages of 2 MiB) with its "
         "descriptors and the allocator's header, so sizeof(buf_block_t) is below 510 bytes",
         "measured on 9.7.4 (Debian sid's mysql-server-core): smaps, 8 mappings of "
         "135168 kB for innodb_buffer_pool_size = 1G", measured=True),
    Rule("default_size", "mysql", ANY,
         "only the default huge page size (Hugepagesize in /proc/meminfo) is used",
         "large_page_alloc-linux.h large_page_size(); mysys my_get_large_page_size"),
    Rule("key_cache_sysv", "mysql", (((0,), (8,)),),
         "the MyISAM key cache goes on large pages through SysV shared memory "
         "(needs CAP_IPC_LOCK or vm.hugetlb_shm_group)", "mysys/my_largepage my_large_malloc_int"),
    Rule("key_cache_heap", "mysql", (((8,), (999,)),),
         "the MyISAM key cache is allocated with my_malloc, never on large pages",
         "mysys/mf_keycache.cc init_key_cache (the 8.0 tree); measured on 9.7.4: only the "
         "buffer pool's chunks were on huge pages, key_buffer_size = 8 MiB", measured=True),
    Rule("instances_8", "mysql", (((5, 7), (8, 4)),),
         "innodb_buffer_pool_instances defaults to 8, or 1 below a 1 GiB pool",
         "MySQL 8.0 manual, innodb_buffer_pool_instances"),
    Rule("instances_84", "mysql", (((8, 4), (999,)),),
         "innodb_buffer_pool_instances defaults to 1 up to a 1 GiB pool, else the smaller of "
         "(pool / chunk) / 2 and a quarter of the logical CPUs, within 1-64",
         "MySQL 8.4 manual, innodb_buffer_pool_instances"),
)


@dataclass(frozen=True)
class Model:
    """What one server release does with large pages, as sizing and the findings need it."""
    flavour: str
    version: Version | None
    rules: tuple[Rule, ...] = field(default_factory=tuple)

    def has(self, key: str) -> bool:
        return any(r.key == key for r in self.rules)

    @property
    def this_release_measured(self) -> bool:
        """This very release was measured here (its chunk mappings counted from smaps)."""
        return bool(self.version) and tuple(self.version[:3]) in (MEASURED, MEASURED_MYSQL)

    @property
    def measured(self) -> bool:
        """The rules that size the buffer pool were measured on a server of this design here."""
        return self.single_pool

    @property
    def sysv(self) -> bool:
        return self.has("sysv")

    @property
    def single_pool(self) -> bool:
        return self.has("single_pool")

    @property
    def chunk_header(self) -> int:
        """Bytes the allocator adds to each chunk mapping: MySQL's ut::malloc_large_page puts
        one CPU page of metadata before the data (large_page_alloc.h, Large_page_alloc)."""
        return 4096 if self.flavour == "mysql" and not self.sysv else 0

    @property
    def block_descriptor(self) -> int:
        """Bytes counted per buffer pool page for its block descriptor (sizeof(buf_block_t),
        which differs per release): the measured bound where there is one, else 512, above
        every release we know."""
        return 504 if self.has("descriptor_504") else 512

    @property
    def sizes_from(self) -> str:
        """Where the server learns the huge page sizes at start: without it, no large pages."""
        return "/sys/kernel/mm/hugepages" if self.has("sizes_sys") else "/proc/meminfo"

    def instances(self, pool: int, chunk: int, cpus: int) -> int:
        """innodb_buffer_pool_instances when it is not set."""
        if self.has("instances_84"):
            if pool <= 1 << 30:
                return 1
            return max(1, min(64, pool // max(chunk, 1) // 2, cpus // 4))
        if self.has("instances_8"):
            return 8 if pool >= 1 << 30 else 1
        return 1

    def chunk_default(self, pool: int, large_page: int) -> int:
        if self.has("chunk_autosize"):
            c = pool // 64
            if large_page:
                c -= c % large_page
            return max(c, 1 << 20)
        return 128 << 20

    def summary(self) -> str:
        """One line for `size` and the demand's source: the release and how it was known."""
        name = "MariaDB" if self.flavour == "mariadb" else "MySQL"
        ver = ".".join(map(str, self.version)) if self.version else "of unknown version"
        if self.this_release_measured:
            how = "rules measured on this release here"
        elif self.measured:
            how = "rules measured here on MariaDB 10.11.19, of the same buffer pool design"
        else:
            how = "modelled from the server's source and manual, not measured here"
        return f"{name} {ver}: {how}"


def model(flavour: str, version: Version | None) -> Model:
    return Model(flavour, version, tuple(r for r in RULES if r.holds(flavour, version)))
