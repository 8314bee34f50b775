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

_URL_USERINFO = re.compile(r"(://[^:/@\s]*):[^@/\s]*@")
_QUERY = re.compile(r"([?&][\w.\-]*(?:password|secret|token)[\w.\-]*=)[^&\s'\"]*", re.I)
# name = value, name=value, name: value (ini, conninfo, YAML-ish), value quoted or bare
_ASSIGN = re.compile(r"""(?P<name>[\w.\-]*(?:pass(?:word|wd)?|secret|token|api[_\-]?key|
                         credential|private[_\-]?key)[\w.\-]*)
                         (?P<sep>\s*[=:]\s*)
                         (?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s'",;&]+)""",
                     re.I | re.X)


def redact_dsn(dsn: str) -> str:
    """A DSN with its password replaced, in URI and key=value forms."""
    dsn = _URL_USERINFO.sub(rf"\1:{REDACTED}@", dsn)
    dsn = _QUERY.sub(rf"\1{REDACTED}", dsn)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", rf"\1{REDACTED}", dsn, flags=re.I)


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
