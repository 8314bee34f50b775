"""Write the manual pages (man/man1/hpadvise.1 and hpadvise-COMMAND.1) and the shell
completion scripts (completions/) from the CLI's own help: what the wheel ships in its data
files. Run after changing a command, an option or a help text; a test fails while they
differ from what the CLI says."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def expected() -> dict[Path, str]:
    from hpadvise.cli import manual
    out = {REPO / "man" / "man1" / f"{name}.1": manual.roff(page)
           for name, page in manual.pages().items()}
    out.update({REPO / "completions" / name: manual.completion(shell)
                for name, shell in manual.COMPLETIONS.items()})
    return out


def main() -> int:
    want = expected()
    for d in {p.parent for p in want}:
        for old in d.glob("*"):  # a page of a command that is gone
            if old not in want:
                old.unlink()
        d.mkdir(parents=True, exist_ok=True)
    for path, text in want.items():
        path.write_text(text)
    print(f"wrote {len(want)} files under man/man1 and completions/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
