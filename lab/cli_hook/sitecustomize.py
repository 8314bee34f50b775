"""Where a suite run's hpadvise commands spend their time: with this folder on PYTHONPATH
and HPADVISE_CLI_TIMES set to a file, every `python -m hpadvise.cli` process appends, as it
exits, its subcommand, wall and CPU time and the test that ran it (pytest's
PYTEST_CURRENT_TEST, which the tests' environment passes on). lab/cli_time.py reads it.

    PYTHONPATH=$PWD/lab/cli_hook HPADVISE_CLI_TIMES=/tmp/cli.jsonl \\
        CI=true scripts/test.sh --junitxml=RUN.xml

A process killed by a signal writes nothing. Only the subcommand is kept, never the rest of
a command line (it may hold a DSN)."""

import os

if os.environ.get("HPADVISE_CLI_TIMES"):
    import atexit
    import json
    import sys

    def _record():
        try:
            spec = getattr(sys.modules.get("__main__"), "__spec__", None)
            if spec is None or not spec.name.startswith("hpadvise.cli"):
                return
            tick = os.sysconf("SC_CLK_TCK")
            # field 22 of /proc/self/stat: the process's start, in ticks since boot
            start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / tick
            up = float(open("/proc/uptime").read().split()[0])
            t = os.times()
            with open(os.environ["HPADVISE_CLI_TIMES"], "a") as f:
                f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                                    "argv": sys.argv[1:2], "wall": round(up - start, 3),
                                    "cpu": round(t.user + t.system, 3)}) + "\n")
        except Exception:  # an aid to measuring: never the cause of a failed command
            pass

    atexit.register(_record)
