"""What the guest lab's drivers share (numa_lab.py, arm64_lab.py): they run inside a guest
(scripts/guest.sh) with this file beside them in /share, print each command with the guest's
clock as they go (the host reads /share/out.log), and run hpadvise from /share/pylib."""

import json
import subprocess
import sys
import time
import traceback

HP = [sys.executable, "-m", "hpadvise.cli"]


def say(text: str) -> None:
    print(f"[{time.monotonic():8.1f}] {text}", flush=True)


def sh(cmd, check=True, timeout=600):
    """Run a command (a string through the shell, or a list); its output, or an error with
    its standard error's tail when `check` and it failed."""
    say(cmd if isinstance(cmd, str) else " ".join(cmd))
    r = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}: {r.stderr.strip()[-800:]}")
    return r


def hp(*args: str) -> dict:
    """hpadvise with these arguments: exit status, standard error's tail, its JSON (or the
    tail of what it printed when that is not JSON)."""
    r = sh(HP + list(args), check=False)
    out = {"rc": r.returncode, "stderr": r.stderr[-2000:]}
    try:
        out["json"] = json.loads(r.stdout)
    except ValueError:
        out["stdout"] = r.stdout[-3000:]
    return out


def run_cases(cases: dict, result: dict, cleanup) -> None:
    """Each case named on the command line (else all) in turn: its facts, or its traceback and
    then `cleanup()`, timed; /share/result.json is rewritten after each, so that a guest that
    dies midway leaves what it saw."""
    for name in sys.argv[1:] or list(cases):
        t = time.monotonic()
        try:
            result[name] = cases[name]()
        except Exception:
            result[name] = {"error": traceback.format_exc()[-3000:]}
            cleanup()
        result[name]["seconds"] = round(time.monotonic() - t, 1)
        with open("/share/result.json", "w") as f:
            json.dump(result, f, indent=1, default=str)
