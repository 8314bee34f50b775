"""What validate and capture (hpadvise.benchmarks) take of the core beyond hpadvise.api.face:
the planning and apply's preparation they share with apply, the THP knobs the plan sets, the
journal, the actions that switch a variant's pools and THP, and the readers of what a run
measures. Re-exported, not redefined: each name lives in its stage (tests/unit/test_layout.py
holds benchmarks/ to these two faces)."""

from ..changes.actions import Action, Compact, Pool, SysfsChoice, Sysctl
from ..changes.scratch import ScratchDir
from ..facts.host import read_vmstat
from ..facts.platform import read_cpu_times
from ..facts.probe import dtlb_events, parse_perf_csv, pmu_state
from ..facts.thp_rules import parse_knob
from ..kit.paths import HUGEPAGES_DIR, pool_dir, thp_file
from ..kit.secrets import redact_args
from ..kit.sizing import GIB_KB
from ..api.engines import registry
from ..ledger import journal
from ..ledger.stacked import refuse_stacked
from ..kit.knob_id import THP_FILES, KnobId, read_choice, size_of_dir
from ..nextboot.boot_plan import knob_now, plan_knobs
from ..planning.pipeline import joined, plan_of, report_of, select, survey
from .apply import prepare

__all__ = [
    "Action", "Compact", "GIB_KB", "HUGEPAGES_DIR", "KnobId", "Pool", "ScratchDir",
    "SysfsChoice", "Sysctl", "THP_FILES", "dtlb_events", "joined", "journal", "knob_now",
    "parse_knob", "parse_perf_csv", "plan_knobs", "plan_of", "pmu_state", "pool_dir",
    "prepare", "read_choice", "read_cpu_times", "read_vmstat", "redact_args", "refuse_stacked",
    "registry", "report_of", "select", "size_of_dir", "survey", "thp_file",
]
