"""Block-style YAML for the manifests hpadvise prints, without a YAML library at run time.

Every string is written JSON-quoted, which YAML reads back as that string (YAML 1.2, "JSON
compatibility"): `on`, `off`, `yes` or `1GB` stay strings, where a plain scalar would turn
`on` into a boolean under YAML 1.1 readers (the CloudNativePG CRD then rejects it: "True is
not of type 'string'"). Keys are written plain when they are plain words."""

from __future__ import annotations

import json
import re

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
_YAML11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _key(k: str) -> str:
    return k if _PLAIN_KEY.fullmatch(k) and k.lower() not in _YAML11_WORDS else json.dumps(k)


def _scalar(v) -> str:
    """A scalar or an empty collection: str quoted; int, float, bool (true/false), None
    (null) and {} / [] as JSON writes them, which YAML reads the same."""
    return json.dumps(v)


def dump(obj, indent: int = 0) -> str:
    """`obj` (dicts, lists, scalars) as block YAML lines, each ending in a newline."""
    pad = " " * indent
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{_key(str(k))}:\n" + dump(v, indent + 2))
            else:
                out.append(f"{pad}{_key(str(k))}: {_scalar(v)}\n")
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                inner = dump(v, indent + 2)
                out.append(f"{pad}- {inner.lstrip()}")
            else:
                out.append(f"{pad}- {_scalar(v)}\n")
    else:
        out.append(f"{pad}{_scalar(obj)}\n")
    return "".join(out)
