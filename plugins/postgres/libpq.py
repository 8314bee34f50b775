"""The few statements hpadvise sends a PostgreSQL server (check's setting queries, apply's ALTER
SYSTEM), through libpq itself over ctypes.

Why not a driver: importing one costs more than the rest of `check` together (psycopg: about
100 ms per run, most of it modules check never uses); libpq is the library every PostgreSQL
client links, and it brings the whole connection logic with it: DSNs and URIs, ~/.pgpass,
PG* environment variables, SCRAM, TLS. Only documented libpq calls are used (PostgreSQL
documentation, "libpq - C Library": 34.1 Database Connection Control Functions, 34.3 Command
Execution Functions); every value comes back as text.

Where libpq is found, first that loads: the system's (Debian's libpq5, what ld.so finds), the
lib directory beside the server's own binaries (RHEL's /usr/pgsql-N/lib, custom prefixes), and
the copy psycopg's binary wheel carries (an hpadvise dependency, so one is always there).
"""

from __future__ import annotations

import ctypes
import glob
import os

# ConnStatusType and ExecStatusType values (src/interfaces/libpq/libpq-fe.h)
CONNECTION_OK = 0
PGRES_COMMAND_OK, PGRES_TUPLES_OK = 1, 2

# The first libpq that loads serves every server of the run: any libpq speaks frontend/backend
# protocol 3.0, which every server since 7.4 accepts (PostgreSQL documentation, 55.1 "Overview"
# of the protocol: version negotiation), whatever the server's own major.
_lib: ctypes.CDLL | None = None


class PqError(Exception):
    """A failed connection or statement, with libpq's own message."""


def _candidates(bindirs: tuple[str, ...]) -> list[str]:
    out = ["libpq.so.5"]
    out += [os.path.join(os.path.dirname(d.rstrip("/")), "lib", "libpq.so.5") for d in bindirs]
    import importlib.util
    spec = importlib.util.find_spec("psycopg_binary")
    if spec and spec.origin:  # a wheel's bundled copy: psycopg_binary.libs/libpq-<hash>.so.5.*
        site = os.path.dirname(os.path.dirname(spec.origin))
        out += sorted(glob.glob(os.path.join(site, "psycopg_binary.libs", "libpq*.so*")))
    return out


def _load(bindirs: tuple[str, ...] = ()) -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for name in _candidates(bindirs):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            tried.append(name)
            continue
        P, S, I = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        for fn, res, args in (
                ("PQconnectdbParams", P, [ctypes.POINTER(S), ctypes.POINTER(S), I]),
                ("PQstatus", I, [P]), ("PQerrorMessage", S, [P]), ("PQfinish", None, [P]),
                ("PQuser", S, [P]),
                ("PQexecParams", P, [P, S, I, P, ctypes.POINTER(S), P, P, I]),
                ("PQresultStatus", I, [P]), ("PQresultErrorMessage", S, [P]),
                ("PQntuples", I, [P]), ("PQnfields", I, [P]),
                ("PQgetisnull", I, [P, I, I]), ("PQgetvalue", S, [P, I, I]),
                ("PQclear", None, [P]),
                ("PQescapeLiteral", P, [P, S, ctypes.c_size_t]),
                ("PQescapeIdentifier", P, [P, S, ctypes.c_size_t]),
                ("PQfreemem", None, [P]),
                ("PQconninfoParse", P, [S, ctypes.POINTER(P)]),
                ("PQconninfoFree", None, [P])):
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        _lib = lib
        return lib
    raise PqError("libpq not found (tried " + ", ".join(tried) + "); install the PostgreSQL "
                  "client library (Debian: libpq5, RHEL: libpq)")


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace").strip()


class Connection:
    """One connection; `execute` runs one statement and returns its rows as text (None for
    NULL). Use as a context manager, as the drivers' connections are."""

    def __init__(self, params: dict[str, object], bindirs: tuple[str, ...] = ()):
        self.lib = _load(bindirs)
        # expand_dbname = 1: a `dbname` holding a connection string or URI is expanded in
        # place, and the keywords after it override what it says (34.1, PQconnectdbParams).
        items = [(k, str(v)) for k, v in params.items() if v is not None]
        keys = (ctypes.c_char_p * (len(items) + 1))(*[k.encode() for k, _ in items], None)
        vals = (ctypes.c_char_p * (len(items) + 1))(*[v.encode() for _, v in items], None)
        self.pg = self.lib.PQconnectdbParams(keys, vals, 1)
        if not self.pg or self.lib.PQstatus(self.pg) != CONNECTION_OK:
            msg = _text(self.lib.PQerrorMessage(self.pg)) if self.pg else "out of memory"
            self.close()
            raise PqError(msg or "connection failed")

    @property
    def user(self) -> str:
        return _text(self.lib.PQuser(self.pg))

    def execute(self, sql: str, params: tuple[str, ...] = ()) -> list[tuple[str | None, ...]]:
        lib = self.lib
        vals = (ctypes.c_char_p * max(len(params), 1))(*[p.encode() for p in params])
        res = lib.PQexecParams(self.pg, sql.encode(), len(params), None, vals, None, None, 0)
        try:
            status = lib.PQresultStatus(res) if res else -1
            if status not in (PGRES_COMMAND_OK, PGRES_TUPLES_OK):
                msg = lib.PQresultErrorMessage(res) if res else lib.PQerrorMessage(self.pg)
                raise PqError(_text(msg) or "statement failed")
            return [tuple(None if lib.PQgetisnull(res, r, c)
                          else lib.PQgetvalue(res, r, c).decode("utf-8", "replace")
                          for c in range(lib.PQnfields(res)))
                    for r in range(lib.PQntuples(res))]
        finally:
            if res:
                lib.PQclear(res)

    def _escape(self, fn, value: str) -> str:
        raw = value.encode()
        p = fn(self.pg, raw, len(raw))
        if not p:
            raise PqError(_text(self.lib.PQerrorMessage(self.pg)) or "cannot quote")
        try:
            return ctypes.string_at(p).decode()
        finally:
            self.lib.PQfreemem(p)

    def literal(self, value: str) -> str:
        """`value` as an SQL literal, quoted by the server connection's rules."""
        return self._escape(self.lib.PQescapeLiteral, value)

    def identifier(self, name: str) -> str:
        return self._escape(self.lib.PQescapeIdentifier, name)

    def close(self) -> None:
        if self.pg:
            self.lib.PQfinish(self.pg)
            self.pg = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Option(ctypes.Structure):
    # PQconninfoOption (libpq-fe.h)
    _fields_ = [("keyword", ctypes.c_char_p), ("envvar", ctypes.c_char_p),
                ("compiled", ctypes.c_char_p), ("val", ctypes.c_char_p),
                ("label", ctypes.c_char_p), ("dispchar", ctypes.c_char_p),
                ("dispsize", ctypes.c_int)]


def password_of(dsn: str) -> str | None:
    """The password a connection string or URI carries, parsed by libpq itself (so an error
    message can be cleaned of it); None when it has none or does not parse."""
    try:
        lib = _load()
    except PqError:
        return None
    err = ctypes.c_void_p()
    opts = lib.PQconninfoParse(dsn.encode(), ctypes.byref(err))
    if err.value:
        lib.PQfreemem(err)
    if not opts:
        return None
    try:
        arr = ctypes.cast(opts, ctypes.POINTER(_Option))
        i = 0
        while arr[i].keyword:
            if arr[i].keyword == b"password" and arr[i].val:
                return arr[i].val.decode("utf-8", "replace")
            i += 1
        return None
    finally:
        lib.PQconninfoFree(opts)
