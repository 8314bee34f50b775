"""What an engine may use of the core: everything a plugin imports from hpadvise comes from
here or, for validate and capture, from hpadvise.benchmarks.face (tests/unit/test_layout.py
holds the plugins to it). Re-exported, not redefined: each name lives in its stage.

- the engine API: Engine, its registry's types, the report's model, profiles
- the host's facts: SysRoot, HostFacts, processes and their mappings, containers' roots,
  cgroups, NUMA bindings kept across restarts, THP's rules per mapping
- changes: the Action base and the file and restart actions engines build on
- the kit: errors, sizes and their wording, paths, finding codes, redaction, helper
  processes kept off the host's huge page pools
"""

from ..changes.actions import Action, ActionError, File, FileSetting, Restart
from ..facts.cgroups import limits as cgroup_limits
from ..facts.cgroups import size_name
from ..facts.host import HostFacts, read_meminfo, read_pools
from ..facts.numa import Keep, keep_of, keeper
from ..facts.procs import (Mapping, Proc, ProcTable, backing_of, binary_version, exited,
                           hugetlb_pages, machine_of, memfd_bytes, systemd_unit)
from ..facts.roots import as_seen_inside, exe_of, proc_root, reach, restart_advice, view_of_spec
from ..facts.sysroot import Note, SysRoot
from ..facts.thp_rules import ADVISED, thp_sizes
from ..kit.errors import InputError
from ..kit.findings import HUGETLBPAGE, TRANSHUGE, Code, Codes
from ..kit.knob_id import size_dir
from ..kit.nohuge import run_without_huge_pages
from ..kit.paths import THP_DIR
from ..kit.secrets import redact_text
from ..kit.sizing import counted, fmt_bytes, fmt_page, pages_for, parse_bytes
from ..kit.unknown import Unknown, UnknownFact, known
from .engines import (Change, Demand, Engine, EngineOption, Finding, Instance, ServerEngine,
                      Targets, error_line, redact_dsn)
from .model import SCRATCH_MARK
from .profiles import Profile

__all__ = [
    "ADVISED", "Action", "ActionError", "Change", "Code", "Codes", "Demand", "Engine",
    "EngineOption", "File", "FileSetting", "Finding", "HUGETLBPAGE", "HostFacts", "InputError",
    "Instance", "Keep", "Mapping", "Note", "Proc", "ProcTable", "Profile", "Restart",
    "SCRATCH_MARK", "ServerEngine", "SysRoot", "THP_DIR", "TRANSHUGE", "Targets", "Unknown",
    "UnknownFact", "as_seen_inside", "backing_of", "binary_version", "cgroup_limits",
    "counted", "error_line", "exe_of", "exited", "fmt_bytes", "fmt_page", "hugetlb_pages",
    "keep_of", "keeper", "known", "machine_of", "memfd_bytes", "pages_for", "parse_bytes",
    "proc_root", "reach", "read_meminfo", "read_pools", "redact_dsn", "redact_text",
    "restart_advice", "run_without_huge_pages", "size_dir", "size_name", "systemd_unit",
    "thp_sizes", "view_of_spec",
]
