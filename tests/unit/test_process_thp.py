"""A process's own THP mode (prctl PR_SET_THP_DISABLE) as /proc shows it, from processes
captured on Linux 6.18 under enabled = always (tests/fixtures/thp_modes: 8 MiB of private
memory left alone and 8 MiB madvise()d, each touched, in each mode), and the prctl itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpadvise.kit.errors import InputError
from hpadvise.facts.thp_exec import kernel_has_advised, mode_now, process_mode, set_mode

MODES = Path(__file__).resolve().parent.parent / "fixtures" / "thp_modes"


@pytest.mark.parametrize("mode", ["inherit", "advised", "never"])
def test_modes_read_from_status_and_smaps(mode):
    status, smaps = ((MODES / mode / f).read_text() for f in ("status", "smaps"))
    assert process_mode(status, smaps, True, 2048) == mode
    # where the host gives unadvised memory no THP, advised and inherit differ in nothing
    assert process_mode(status, smaps, False, 2048) == ("never" if mode == "never" else None)
    assert process_mode(None, smaps, True, 2048) is None


def test_small_mappings_tell_nothing():
    """A process without private memory of a PMD's size (a PostgreSQL postmaster) cannot show
    the advised-only mode: unknown, not inherit."""
    status, smaps = ((MODES / "advised" / f).read_text() for f in ("status", "smaps"))
    # as if the PMD were 1 GiB: no mapping of the process holds an aligned one
    assert process_mode(status, smaps, True, 1 << 20) is None


def test_kernel_versions():
    assert kernel_has_advised("6.18.44-fc") and kernel_has_advised("7.0.1")
    assert not kernel_has_advised("6.12.48+deb13-amd64") and not kernel_has_advised(None)


def test_set_mode_in_a_child_is_inherited_by_what_it_runs():
    """The mode set before exec is the one the program started runs in (PR_GET_THP_DISABLE
    in the child: 3 for advised, 1 for never)."""
    probe = "import ctypes; print(ctypes.CDLL(None).prctl(42, 0, 0, 0, 0))"
    for mode, want in (("never", "1"), ("advised", "3"), ("inherit", "0")):
        if mode == "advised" and not kernel_has_advised(os.uname().release):
            continue
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           preexec_fn=lambda m=mode: set_mode(m))
        assert r.stdout.strip() == want, (mode, r.stderr)
    assert mode_now() == "inherit"  # the test process itself untouched
    with pytest.raises(InputError, match="give one of"):
        set_mode("sometimes")


@pytest.mark.parametrize("mode,kb", [("inherit", 8192), ("advised", 0), ("never", 0)])
def test_thp_held_in_memory_not_madvised(mode, kb):
    """The 8 MiB left alone holds 8 MiB of THP only in the default mode; the madvise()d 8 MiB
    beside it is not counted."""
    from hpadvise.facts.thp_exec import unadvised_thp_kb
    assert unadvised_thp_kb((MODES / mode / "smaps").read_text()) == kb
