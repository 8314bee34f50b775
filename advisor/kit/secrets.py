"""Secrets out of everything hpadvise writes: output, JSON, snapshots, reports, the journal.

Where secrets live on a database host, and what hpadvise reads of them:
- DSNs: `scheme://user:PASSWORD@host`, libpq's `password=PASSWORD` key/value form and
  `?password=` parameters (given with --dsn, or on a client's command line);
- option files: MySQL's `[client] password = ...` (~/.my.cnf, which discovery reads), a
  PostgreSQL `primary_conninfo = '... password=...'`;
- command lines: `--password=...`, Java system properties such as `-Ddb.password=...`;
- environments: PGPASSWORD, MYSQL_PWD, *_TOKEN, *_SECRET ... (a JVM's environment is read for
  its JAVA_TOOL_OPTIONS).
A value is a secret when its name says so (SECRET_NAME). Redaction keeps the name and replaces
the value with REDACTED, so a reader still sees that a password was set and where.
"""

from __future__ import annotations

import re

REDACTED = "***"

# Names whose values are secret: password, passwd, pwd (MYSQL_PWD), secret, token, api key,
# credentials, private key. Matched anywhere in the name, case-insensitively.
SECRET_NAME = re.compile(r"pass(word|wd)?|(^|[_.\-])pwd($|[_.\-])|secret|token|api[_\-]?key|"
                         r"credential|private[_\-]?key", re.I)
# Names that look secret and are not: the shell's working directories.
NOT_SECRET = frozenset({"PWD", "OLDPWD"})


def is_secret(name: str) -> bool:
    return name not in NOT_SECRET and SECRET_NAME.search(name) is not None

# user:password@ in a URI within free text, up to the *last* @ before the host: a password
# with an unescaped @ or / must not leave a piece of itself behind (RFC 3986 reserves both in
# userinfo). DSNs themselves go through redact_dsn.
_URL_USERINFO = re.compile(r"(://[^:/@\s]*):[^\s]*@")
_QUERY = re.compile(r"([?&][\w.\-]*(?:password|secret|token)[\w.\-]*=)[^&\s'\"]*", re.I)
# the same in a DSN, which is one token: the value runs to the next parameter, spaces and
# all, and over any `&` that starts no `key=value` (a password with an unescaped &)
_DSN_QUERY = re.compile(r"([?&][\w.\-]*(?:password|secret|token)[\w.\-]*=)"
                        r"[^&]*(?:&[^&=]*(?=&|$))*", re.I)
# name = value, name=value, name: value (ini, conninfo, YAML-ish), value quoted or bare
_ASSIGN = re.compile(r"""(?P<name>[\w.\-]*(?:pass(?:word|wd)?|secret|token|api[_\-]?key|
                         credential|private[_\-]?key)[\w.\-]*)
                         (?P<sep>\s*[=:]\s*)
                         (?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s'",;&]+)""",
                     re.I | re.X)


# libpq's key=value password: a quoted value that ends where a value ends, else (quoting
# broken: a quote inside) everything to the end, else a bare word with any words after it
# that are no `key=value` (a password with a space, unquoted: libpq stops at the space).
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'(?=\s|$)|'.*|"
                          r"[^\s']\S*(?:\s+[^\s=']+(?=\s|$))*)", re.I)


def _userinfo(dsn: str) -> tuple[int, int] | None:
    """Where a URI's password is (start, end), or a scheme-less `user:password@host`'s: from
    the first `:` after the user to the last `@`. None when the `:` is a port's
    (host:5432/db?x=a@b) or the user has no password."""
    start = dsn.find("://") + 3 if "://" in dsn else 0
    at = dsn.rfind("@")
    if at <= start:
        return None
    user, colon, password = dsn[start:at].partition(":")
    if not colon or re.search(r"[@/\s=]", user) or password.split("/", 1)[0].isdigit():
        return None
    return start + len(user) + 1, at


def redact_dsn(dsn: str) -> str:
    """A DSN with its password replaced, in URI and key=value forms, however malformed."""
    span = _userinfo(dsn)
    if span:
        dsn = dsn[:span[0]] + REDACTED + dsn[span[1]:]
    dsn = _DSN_QUERY.sub(rf"\1{REDACTED}", dsn)
    return _KV_PASSWORD.sub(rf"\1{REDACTED}", dsn)


def redact_text(text: str) -> str:
    """Free text (an option file, a log, a command line): every `secret-name = value` and every
    URL password replaced. Lines without such a name are left byte for byte."""
    text = _URL_USERINFO.sub(rf"\1:{REDACTED}@", text)
    text = _QUERY.sub(rf"\1{REDACTED}", text)
    return _ASSIGN.sub(lambda m: m["name"] + m["sep"] + REDACTED, text)


def redact_args(argv: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A command line with secret values replaced: `--password=x`, `-Dx.password=x`,
    `PASSWORD=x`, DSNs; a bare `--password x` hides the next argument."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if a.startswith("-") and "=" not in a and is_secret(a):
            hide_next = True  # `--password VALUE`
        out.append(redact_text(a))
    return tuple(out)


def redact_environ(env: dict[str, str]) -> dict[str, str]:
    """An environment with the values of secret-looking names replaced, and secrets inside
    the other values (a DSN in DATABASE_URL, -Dx.password= in JAVA_TOOL_OPTIONS) too."""
    return {k: REDACTED if is_secret(k) else redact_text(v) for k, v in env.items()}


# ---- the one filter every output goes through

# Secrets seen during this run (DSN passwords, a password environment variable): removed from
# everything written, whatever the text around them. Shorter ones are left to the patterns
# above: replacing two letters everywhere would garble the output and hide nothing.
_KNOWN: set[str] = set()
MIN_KNOWN = 4


def remember(secret: str | None) -> None:
    """A secret to remove from all output from now on (with its URL-encoded form)."""
    if secret and len(secret) >= MIN_KNOWN:
        from urllib.parse import quote
        _KNOWN.update({secret, quote(secret, safe="")})


def _dsn_password(dsn: str) -> list[str]:
    """The password a DSN holds, however malformed (found as redact_dsn finds it), decoded
    as well, with the pieces a parser that stops at a separator would echo."""
    from urllib.parse import unquote
    out = []
    span = _userinfo(dsn)
    if span:
        out.append(dsn[span[0]:span[1]])
    out += [m.group(0)[len(m.group(1)):] for m in _DSN_QUERY.finditer(dsn)]
    for m in _KV_PASSWORD.finditer(dsn):  # a quoted value as libpq reads it: \x is x
        v = m.group(2)
        out += [v, re.sub(r"\\(.)", r"\1", v[1:-1] if v.endswith("'") and len(v) > 1
                          else v[1:])] if v.startswith("'") else [v]
    out = [x for x in out if x] + [unquote(x) for x in out if x]
    return out + [p for x in out for p in re.split(r"[/@:?#&=%'\" ;\\]", x) if p != x]


def _user_alone(dsn: str) -> bool:
    """A URI whose userinfo is a user and nothing else (postgresql://app@db1/postgres): it
    holds no password, and neither does a DSN without a password key."""
    if "://" not in dsn or "password" in dsn.lower():
        return False
    userinfo = dsn[dsn.find("://") + 3:dsn.rfind("@")]
    return not re.search(r"[:/?#\s]", userinfo)


def remember_dsn(dsn: str) -> None:
    """Every password a DSN holds, for scrub; a DSN that names one where none can be told
    apart (redaction finds nothing, but it has an `@` or a password key) is remembered
    whole. A URI with a user and no password is no secret: it names the instance."""
    for secret in _dsn_password(dsn):
        remember(secret)
    if redact_dsn(dsn) == dsn and ("@" in dsn or "password" in dsn.lower()) \
            and not _user_alone(dsn):
        remember(dsn)


def check_dsn(dsn: str) -> str:
    """A DSN as given on the command line, refused in one line (without its password) where
    it cannot mean what its writer meant: a URI whose password holds an unescaped `/`, `@`,
    `?`, `#` or a space (libpq and urllib split there, and would echo a piece of the password
    in their errors). Its passwords are remembered for scrub either way."""
    from .errors import InputError
    remember_dsn(dsn)
    span = _userinfo(dsn) if "://" in dsn else None
    query = dsn.partition("?")[2] if "://" in dsn else ""
    if query and any("=" not in p or re.search(r"\s", p) for p in query.split("&")):
        raise InputError(f"--dsn {redact_dsn(dsn)}: its query holds a parameter that is no "
                         "key=value, or a space: percent-encode & (%26) and spaces (%20) in "
                         "values, or give it in key=value form (host=... password=...)")
    if span and re.search(r"[@/?#\s]", dsn[span[0]:span[1]]):
        raise InputError(f"--dsn {redact_dsn(dsn)}: the password holds a '/', '@', '?', '#' "
                         "or a space, which a URI must percent-encode (%2F, %40, %3F, %23, "
                         "%20); or give it in key=value form (host=... password=...) or "
                         "through PGPASSWORD / ~/.pgpass")
    return dsn


def remember_environ(env: dict[str, str]) -> None:
    """Secrets in hpadvise's own environment (PGPASSWORD, MYSQL_PWD ...)."""
    for k, v in env.items():
        if is_secret(k):
            remember(v)


def scrub(text: str) -> str:
    """Text as hpadvise may write it: every known secret and every secret-looking assignment
    or URI password replaced by REDACTED."""
    for secret in sorted(_KNOWN, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return redact_text(text)


class ScrubbedStream:
    """A text stream whose every write goes through `scrub` first: stdout and stderr are
    wrapped once, when the CLI starts, so no message, table, JSON document or traceback can
    carry a secret out, whatever printed it."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)
