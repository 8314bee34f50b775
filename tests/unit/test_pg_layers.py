"""Where a PostgreSQL setting comes from (layers.winning) on a Debian layout's files: the
postmaster's command line, and Debian's pg_ctl.conf, whose options pg_ctlcluster puts on
the command line at every start."""

from __future__ import annotations

import pytest

from hpadvise.plugins.postgres.layers import winning
from hpadvise.plugins.postgres.state import Cluster
from hpadvise.facts.sysroot import SysRoot

CONF = "/etc/postgresql/16/main/postgresql.conf"


@pytest.fixture
def debian(tmp_path):
    def make(options: str | None) -> SysRoot:
        d = tmp_path / "etc/postgresql/16/main"
        d.mkdir(parents=True, exist_ok=True)
        (d / "postgresql.conf").write_text("huge_pages = try\n")
        if options is not None:
            (d / "pg_ctl.conf").write_text(
                "# Automatic pg_ctl configuration\npg_ctl_options = '%s'\n" % options)
        return SysRoot(str(tmp_path))
    return make


def cluster(source: str) -> Cluster:
    return Cluster(datadir="/var/lib/postgresql/16/main", config_file=CONF,
                   sources={"huge_pages": source}, origins={"huge_pages": "server"})


@pytest.mark.parametrize("options", ['-o "-c huge_pages=off"', '-o "--huge_pages=off"',
                                     '-o "-chuge_pages = off"'])
def test_pg_ctl_conf_added_since_the_start_wins_at_the_next(debian, options):
    lay = winning(debian(options), cluster(f"{CONF}:1"), "huge_pages")
    assert not lay.changeable
    assert lay.where == ("/etc/postgresql/16/main/pg_ctl.conf (pg_ctl_options), which "
                         "pg_ctlcluster puts on the command line at the next start")
    assert lay.how.startswith("change huge_pages in /etc/postgresql/16/main/pg_ctl.conf")


@pytest.mark.parametrize("options", [None, "", '-o "-c huge_page_size=1GB"',
                                     '-o "-c shared_buffers=1GB"'])
def test_other_options_leave_the_files_layer(debian, options):
    lay = winning(debian(options), cluster(f"{CONF}:1"), "huge_pages")
    assert lay.changeable and lay.where == f"{CONF}:1"


def test_on_the_command_line_from_pg_ctl_conf(debian):
    lay = winning(debian('-o "-c huge_pages=off"'), cluster("command line"), "huge_pages")
    assert not lay.changeable
    assert lay.where == ("the postmaster's command line (/etc/postgresql/16/main/pg_ctl.conf "
                         "(pg_ctl_options))")
    assert lay.how == ("change huge_pages in /etc/postgresql/16/main/pg_ctl.conf "
                       "(pg_ctl_options), then restart")


def test_on_the_command_line_from_elsewhere(debian):
    lay = winning(debian(None), cluster("command line"), "huge_pages")
    opts = "/var/lib/postgresql/16/main/postmaster.opts"
    assert lay.where == f"the postmaster's command line (the command line that started it " \
                        f"({opts}))"
    assert lay.how == (f"change -c huge_pages where the server is started (its last command "
                       f"line: {opts}), then restart")
