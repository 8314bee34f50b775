"""The statements hpadvise sends a MySQL or MariaDB server, through the client library the
server's host already has (MariaDB Connector/C's libmariadb, MySQL's libmysqlclient) over
ctypes; mysql-connector-python where neither is installed.

Why: importing mysql-connector costs ~40 ms on each run of `check` (its C extension and the
modules around it) for the five read-only statements check sends. The calls used are the
C API both libraries document alike (MySQL 8.4 C API Developer Guide, "C API Basic Function
Descriptions"; MariaDB Connector/C API Functions): mysql_init, mysql_options with
MYSQL_OPT_CONNECT_TIMEOUT, mysql_real_connect, mysql_query, mysql_store_result,
mysql_fetch_row, mysql_close. Every value comes back as text, None for NULL.
"""

from __future__ import annotations

import ctypes

# Names of the client library, newest first; each is a stable soname of its project.
LIBRARIES = ("libmariadb.so.3", "libmysqlclient.so.24", "libmysqlclient.so.21")
# enum mysql_option: MYSQL_OPT_CONNECT_TIMEOUT is its first member in both projects' mysql.h.
MYSQL_OPT_CONNECT_TIMEOUT = 0

_lib: ctypes.CDLL | None | bool = False  # False: not looked for yet; None: none installed


class ClientError(Exception):
    """A failed connection or statement, with the client library's own message."""


def _load() -> ctypes.CDLL | None:
    global _lib
    if _lib is not False:
        return _lib
    _lib = None
    for name in LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        P, S, U, I = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint, ctypes.c_int
        for fn, res, args in (
                ("mysql_server_init", I, [I, P, P]), ("mysql_init", P, [P]),
                ("mysql_options", I, [P, I, P]),
                ("mysql_real_connect", P, [P, S, S, S, S, U, S, ctypes.c_ulong]),
                ("mysql_error", S, [P]), ("mysql_query", I, [P, S]),
                ("mysql_store_result", P, [P]), ("mysql_field_count", U, [P]),
                ("mysql_num_fields", U, [P]),
                ("mysql_fetch_row", ctypes.POINTER(ctypes.c_char_p), [P]),
                ("mysql_free_result", None, [P]), ("mysql_close", None, [P])):
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        # Initialised once, before any thread makes a connection (mysql_init is not
        # thread-safe on first use; mysql_library_init is a macro for mysql_server_init).
        if lib.mysql_server_init(0, None, None) == 0:
            _lib = lib
            break
    return _lib


class _Native:
    def __init__(self, lib: ctypes.CDLL, kw: dict, timeout: int):
        self.lib = lib
        self.my = lib.mysql_init(None)
        if not self.my:
            raise ClientError("out of memory")
        t = ctypes.c_uint(timeout)
        lib.mysql_options(self.my, MYSQL_OPT_CONNECT_TIMEOUT, ctypes.byref(t))
        enc = {k: (str(v).encode() if v is not None else None) for k, v in kw.items()}
        # Host None (or "localhost") with a socket connects over the unix socket.
        if not lib.mysql_real_connect(self.my, enc.get("host"), enc.get("user"),
                                      enc.get("password"), enc.get("database"),
                                      int(kw.get("port") or 0), enc.get("unix_socket"), 0):
            msg = self._error()
            self.close()
            raise ClientError(msg)

    def _error(self) -> str:
        return (self.lib.mysql_error(self.my) or b"").decode("utf-8", "replace")

    def execute(self, query: str) -> list[tuple]:
        lib = self.lib
        if lib.mysql_query(self.my, query.encode()) != 0:
            raise ClientError(self._error())
        res = lib.mysql_store_result(self.my)
        if not res:
            if lib.mysql_field_count(self.my):  # a result was due but could not be read
                raise ClientError(self._error())
            return []
        try:
            n = lib.mysql_num_fields(res)
            rows = []
            while True:
                row = lib.mysql_fetch_row(res)
                if not row:
                    break
                rows.append(tuple(None if row[i] is None
                                  else row[i].decode("utf-8", "replace") for i in range(n)))
            return rows
        finally:
            lib.mysql_free_result(res)

    def close(self) -> None:
        if self.my:
            self.lib.mysql_close(self.my)
            self.my = None


class _Connector:
    """mysql-connector-python, where no client library is installed."""

    def __init__(self, kw: dict, timeout: int):
        try:
            import mysql.connector
        except ImportError:
            raise ClientError("no MySQL client library (libmariadb.so.3, libmysqlclient) and "
                              "no mysql-connector: install the client library (Debian: "
                              "libmariadb3) or pip install 'hpadvise[mysql-connector]'") from None
        self.conn = mysql.connector.connect(connection_timeout=timeout, autocommit=True,
                                            **{k: v for k, v in kw.items() if v is not None})

    def execute(self, query: str) -> list[tuple]:
        cur = self.conn.cursor()
        cur.execute(query)
        rows = cur.fetchall() if cur.with_rows else []
        return [tuple(None if v is None else v.decode() if isinstance(v, (bytes, bytearray))
                      else str(v) for v in r) for r in rows]

    def close(self) -> None:
        self.conn.close()


class Connection:
    """One connection (keywords: host, port, user, password, database, unix_socket); use as a
    context manager. `native=False` takes mysql-connector even where a library is found."""

    def __init__(self, timeout: int = 3, native: bool = True, **kw):
        lib = _load() if native else None
        self.impl = _Native(lib, kw, timeout) if lib else _Connector(kw, timeout)
        self.via = "client library" if lib else "mysql-connector"

    def execute(self, query: str) -> list[tuple]:
        return self.impl.execute(query)

    def close(self) -> None:
        self.impl.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
