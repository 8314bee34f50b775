"""What the optional extras are for: without numpy `probe` says to install hpadvise[probe];
without a MySQL client library and without mysql-connector a MySQL connection says what to
install. One line each, before anything is touched."""

import sys

import pytest

from hpadvise.kit.errors import InputError
from hpadvise.plugins.mysql import client


def test_probe_without_numpy(monkeypatch):
    from hpadvise.facts import probe
    monkeypatch.setitem(sys.modules, "numpy", None)  # as if not installed
    with pytest.raises(InputError, match=r"hpadvise\[probe\]"):
        probe.run(1 << 30)


def test_mysql_without_a_client_library_or_connector(monkeypatch):
    monkeypatch.setattr(client, "_lib", None)
    monkeypatch.setitem(sys.modules, "mysql.connector", None)
    with pytest.raises(client.ClientError, match=r"libmariadb3.*hpadvise\[mysql-connector\]"):
        client.Connection(1, unix_socket="/nonexistent.sock", user="root")
