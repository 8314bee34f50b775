"""Every command's exit codes, one table: each command's help (and so its manual page) ends
with its line (the command's epilog), and a test holds every command to having one. Across all of them, 70 is a bug
in hpadvise (one line; HPADVISE_DEBUG=1 shows the traceback) and 130 an interrupt."""

from __future__ import annotations

# what every command may also end with (thp-exec: before it runs COMMAND)
ANY = "Any command: 70 a bug in hpadvise (one line; HPADVISE_DEBUG=1 shows the traceback); " \
    "130 interrupted."

EXITS = {
    "check": "0 done; 1 a finding reached --fail-on; 2 bad input (the report is still printed "
             "where it could be made).",
    "snapshot": "0 written; 2 bad input (a directory that exists and is not empty, or that "
                "cannot be made).",
    "k8s": "0 done; 2 bad input (no such engine or instance, or an instance whose facts cannot "
           "be read).",
    "apply": "0 applied and read back (or nothing to change, or --dry-run); 1 a step failed, or "
             "a restart came back off huge pages (what it changed is undone, said on stderr), "
             "or the confirmation was declined; 2 bad input (nothing changed); 130 interrupted "
             "(what it changed stays journaled: `hpadvise rollback` undoes it).",
    "rollback": "0 restored (with --dry-run: shown); 1 a knob could not be restored or "
                "read back as it was (each named on stderr), or the confirmation was declined; 2 "
                "bad input (no such apply, none left to roll back, a journal that cannot be "
                "read).",
    "history": "0 done (also when nothing is recorded); 2 a journal that cannot be read.",
    "validate": "0 measured and every knob restored (the verdict is in the report, not the exit "
                "code); 1 the run could not go on, or a knob could not be restored (said on "
                "stderr); 2 bad input (nothing changed); 130 interrupted (every knob restored).",
    "capture": "0 captured and every setting put back; 1 a setting could not be put back (said "
               "on stderr: `hpadvise rollback` finishes it); 2 bad input (nothing changed); 130 "
               "interrupted (every setting put back).",
    "size": "0 every pool fits (at runtime or after a boot-time reservation); 1 a pool does not "
            "fit (the report is printed, and one line on stderr says which); 2 bad input.",
    "report": "0 done; 2 a path that is not a `check --json` output or a snapshot.",
    "probe": "0 measured, and every pool it grew given back; 2 bad input; 130 interrupted (the "
             "pools given back; a probe killed outright leaves them to `hpadvise rollback`).",
    "engines": "0 done; 2 bad input.",
    "profiles": "0 done; 2 bad input.",
    "thp-exec": "COMMAND's own exit status once it runs. Before it runs: 2 no command, a "
                "command that cannot be run, or a THP mode this kernel does not have; 70 a bug "
                "in hpadvise; 130 interrupted.",
    "man": "0 printed; 2 no such page.",
}


def exit_codes(name: str) -> str:
    """A command's exit codes as its help and page end with them: its own, then what any
    command may also end with (a bug; an interrupt, where its own do not say it already).
    thp-exec: COMMAND's, which hpadvise does not add to."""
    own = EXITS[name]
    if name == "thp-exec":
        return own
    return own + " " + (ANY if "130 " not in own else ANY.split("; 130")[0] + ".")
