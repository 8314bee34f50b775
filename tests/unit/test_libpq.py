"""hpadvise's libpq calls: the password found where a DSN hides it (so errors can be cleaned of
it) and libpq's own message when no server answers."""

import pytest

from hpadvise.plugins.postgres import libpq
from hpadvise.plugins.postgres.discovery import dsn_error


@pytest.mark.parametrize("dsn, pw", [
    ("postgresql://app:s3cr%40t@db.example:5433/app", "s3cr@t"),
    (r"host=db.example password='it\'s secret' user=app", "it's secret"),  # libpq escapes
    ("postgresql://app@db.example/app?password=qwerty", "qwerty"),
    ("host=db.example user=app", None),
    ("not a = valid = conninfo '", None),
])
def test_password_of(dsn, pw):
    assert libpq.password_of(dsn) == pw


def test_no_server_is_libpq_own_message_without_the_password(tmp_path):
    dsn = f"postgresql://app:hunter2@/app?host={tmp_path}&port=1"
    with pytest.raises(libpq.PqError) as e:
        libpq.Connection({"dbname": dsn, "connect_timeout": 2})
    assert "No such file or directory" in str(e.value) and str(tmp_path) in str(e.value)
    line = dsn_error(RuntimeError(f"{e.value} (dsn {dsn}, password hunter2)"), dsn)
    assert "hunter2" not in line and "***" in line
