"""postmaster.opts, the command line of a cluster's last start: read as pg_ctl reads it, its
options as postgres takes them, over the configuration files of a stopped cluster."""

import pytest

from hpadvise.plugins.postgres.conf import ConfError
from hpadvise.plugins.postgres.opts import SOURCE, as_args, last_start, parse, take
from hpadvise.plugins.postgres.state import Cluster
from hpadvise.facts.sysroot import SysRoot

# Written by PostgreSQL 15 here: `pg_ctl -o "-c shared_buffers=1GB" start` on a scratch
# cluster, and Debian's pg_ctlcluster starting its main cluster.
PG_CTL_O = ('/usr/lib/postgresql/15/bin/postgres "-D" "/tmp/hpadvise-pg-ho_wfmns/data" '
            '"-c" "shared_buffers=1GB"\n')
DEBIAN = ('/usr/lib/postgresql/15/bin/postgres "-D" "/var/lib/postgresql/15/main" "-c" '
          '"config_file=/etc/postgresql/15/main/postgresql.conf"\n')


def test_what_the_server_wrote():
    line = parse(PG_CTL_O)
    assert line.binary == "/usr/lib/postgresql/15/bin/postgres"
    assert line.args == ("-D", "/tmp/hpadvise-pg-ho_wfmns/data", "-c", "shared_buffers=1GB")
    assert line.settings == {"shared_buffers": "1GB"}
    assert line.datadir == "/tmp/hpadvise-pg-ho_wfmns/data"
    line = parse(DEBIAN)
    assert line.settings == {"config_file": "/etc/postgresql/15/main/postgresql.conf"}


def test_quoted_arguments_keep_their_spaces():
    line = parse('/opt/pg 16/bin/postgres "-D" "/srv/my data" "-c" '
                 '"log_line_prefix=%m [%p] " "-c" "search_path=a, b"\n')
    assert line.binary == "/opt/pg 16/bin/postgres"  # pg_ctl: up to the first ` "`
    assert line.datadir == "/srv/my data"
    assert line.settings == {"log_line_prefix": "%m [%p] ", "search_path": "a, b"}


@pytest.mark.parametrize("args,expect", [
    # postgres's short options (postmaster.c): -B is in 8 kB blocks, kept verbatim
    (['"-B" "131072"', '"-N" "500"', '"-p" "5433"'],
     {"shared_buffers": "131072", "max_connections": "500", "port": "5433"}),
    (['"-B131072"', '"-N500"'], {"shared_buffers": "131072", "max_connections": "500"}),
    # -c name=value, attached or not; --name=value with dashes for underscores
    (['"-cshared_buffers=2GB"', '"--max-wal-senders=3"', '"--Huge_Pages=on"'],
     {"shared_buffers": "2GB", "max_wal_senders": "3", "huge_pages": "on"}),
    # flags grouped as getopt(3) reads them; the last of a name wins
    (['"-Fi"', '"-c" "shared_buffers=1GB"', '"-B" "256MB"'],
     {"fsync": "false", "listen_addresses": "*", "shared_buffers": "256MB"}),
    # options that set nothing hpadvise reads, with their arguments, are stepped over
    (['"-d" "3"', '"-r" "/tmp/out"', '"-b"', '"-N" "20"'], {"max_connections": "20"}),
    # -c without a value (the postmaster refuses it), and what follows `--`
    (['"-c" "shared_buffers"', '"--"', '"-B" "1"'], {}),
])
def test_options(args, expect):
    line = parse("/usr/bin/postgres " + " ".join(args))
    assert line.settings == expect


@pytest.mark.parametrize("text", [
    "",                                                # empty
    "\n\n",
    '/usr/bin/postgres "-D" "/x"\n"-c" "a=b"\n',       # pg_ctl wants exactly one line
    '/usr/bin/postgres "-D" "/x" "-c" "shared_buffers=1GB\n',  # a quote that never closes
])
def test_unreadable_as_pg_ctl_would(text):
    assert parse(text) is None


def test_no_options():
    line = parse("/usr/lib/postgresql/15/bin/postgres\n")
    assert line.binary.endswith("/postgres") and line.args == () and line.settings == {}


def test_missing_and_garbage_files(tmp_path):
    sr = SysRoot(tmp_path)
    (tmp_path / "d").mkdir()
    assert last_start(sr, "/d") is None and not sr.notes  # never started: no note
    (tmp_path / "d/postmaster.opts").write_text('/usr/bin/postgres "-B\n\x00\x01 garbage\n')
    assert last_start(sr, "/d") is None
    assert sr.notes and sr.notes[-1].path == "/d/postmaster.opts"


def cluster(**files):
    c = Cluster("/data")
    for k, v in files.items():
        c.settings[k], c.origins[k] = v, "/data/postgresql.conf:3"
    return c


def test_the_command_line_outranks_the_files():
    c = cluster(shared_buffers="128MB", max_connections="100", huge_pages="try", port="5432")
    take(c, parse(PG_CTL_O.replace('"shared_buffers=1GB"',
                                   '"shared_buffers=1GB" "-N" "300" "-p" "5499" '
                                   '"-c" "huge_pages=ON"')))
    assert c.settings["shared_buffers"] == "1GB" and c.settings["max_connections"] == "300"
    assert c.settings["huge_pages"] == "on" and c.port == 5499
    assert c.origins["shared_buffers"] == "command line"  # layers.winning: not ours to change
    assert c.sources["shared_buffers"] == SOURCE
    assert c.sources["port"] == SOURCE
    assert c.argv_settings["shared_buffers"] == "1GB"
    # for postgres -C: the same settings again, the shadow's data_directory left to the caller
    take(c, parse('/usr/bin/postgres "-c" "data_directory=/data" "-B" "1000"'))
    assert as_args(c.argv_settings, ("data_directory",)) == ["-c", "shared_buffers=1000"]


def test_none_leaves_the_files_alone():
    c = cluster(shared_buffers="128MB")
    take(c, None)
    assert c.settings == {"shared_buffers": "128MB"} and c.argv_settings == {}


@pytest.mark.parametrize("arg,msg", [('"-B" "lots"', "shared_buffers"),
                                     ('"-N" "1e3"', "max_connections"),
                                     ('"-c" "huge_pages=maybe"', "huge_pages")])
def test_a_value_its_parameter_rejects_is_an_error(arg, msg):
    with pytest.raises(ConfError, match=msg) as e:
        take(cluster(shared_buffers="128MB"), parse(f"/usr/bin/postgres {arg}"))
    assert SOURCE in str(e.value)
