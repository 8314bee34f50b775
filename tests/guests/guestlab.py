"""What the guest lab's drivers share (numa_lab.py, arm64_lab.py): they run inside a guest
(scripts/guest.sh) with this file beside them in /share, print each command with the guest's
clock as they go (the host reads /share/out.log), and run hpadvise from /share/pylib."""

import json
import subprocess
import sys
import time
import traceback



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


_WARM: list[bool] = []


def _warm() -> None:
    """Import every module of hpadvise once, here: each command then runs in a process forked
    from this one (a process of its own, as `python -m hpadvise.cli` gives) without paying
    Python's start and hpadvise's imports again on the guest's emulated CPUs (5-6 s a command
    under QEMU's emulation, most of it those)."""
    if _WARM:
        return
    import importlib
    import pkgutil

    import hpadvise
    for m in pkgutil.walk_packages(hpadvise.__path__, "hpadvise."):
        if not m.name.endswith("__main__"):
            try:
                importlib.import_module(m.name)
            except Exception:
                pass  # a module for what the guest lacks: the command imports it, or says so
    _WARM.append(True)


def _forked(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    """hpadvise's console script run on `args` in a child forked from this warm process, its
    output in files (a server it restarts may hold them open after it ends)."""
    import os
    import signal
    import tempfile
    _warm()
    say("hpadvise " + " ".join(args))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the command's process
            code = 70
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                import importlib.util

                from hpadvise.cli import main
                # argv as `python -m hpadvise.cli` makes it: the __main__ module's path first
                sys.argv = [importlib.util.find_spec("hpadvise.cli.__main__").origin, *args]
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise RuntimeError(f"hpadvise {' '.join(args)}: still running after {timeout} s")
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status),
                                           out.read().decode(errors="replace"),
                                           err.read().decode(errors="replace"))


def hp(*args: str) -> dict:
    """hpadvise with these arguments: exit status, standard error's tail, its JSON (or the
    tail of what it printed when that is not JSON)."""
    r = _forked(list(args))
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
