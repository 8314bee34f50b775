"""A fact that could not be read, as a value of its own: what it is, why it is unknown, and what
supplies it. It is falsy, so `fact or default` and `if fact:` read it as missing, and it
refuses to become text or a path: formatting it into a string, joining it into a path or
handing it to os.fspath raises UnknownFact (a TypeError) instead of writing "None", "?" or ""
into a sentence, a shell command or a directory name. What may show it says so: `Unknown.line`
for people, `Unknown.as_json` for machines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class UnknownFact(TypeError):
    """An unknown fact was used as a value (formatted, joined, turned into a path)."""


@dataclass(frozen=True)
class Unknown:
    """`what` (a noun phrase: "the data directory of postmaster 812") is unknown because of
    `why`; `supply` says how the user gives it ("pass --pgdata DIR or --dsn"), "" when
    nothing can."""
    what: str
    why: str
    supply: str = ""

    def line(self) -> str:
        """One line for people: what is unknown, why, and what supplies it."""
        return f"{self.what} is unknown ({self.why})" + (f"; {self.supply}" if self.supply
                                                           else "")

    def as_json(self) -> dict:
        return {"unknown": self.why, **({"supply": self.supply} if self.supply else {})}

    def __bool__(self) -> bool:
        return False

    def _refuse(self, *_: Any) -> Any:
        raise UnknownFact(f"{self.what} is unknown ({self.why}) and cannot be used as a value")

    __str__ = __format__ = __fspath__ = __add__ = __radd__ = __truediv__ = __rtruediv__ = \
        __mod__ = __rmod__ = __iter__ = __len__ = __int__ = __index__ = __float__ = _refuse

    def __repr__(self) -> str:  # debugging and test failures only; no output shows repr
        return f"Unknown({self.what!r}, {self.why!r})"


def known(value: T | Unknown | None) -> bool:
    """The value was read: neither an Unknown nor None."""
    return value is not None and not isinstance(value, Unknown)

