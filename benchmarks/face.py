"""What an engine may use of validate and of the journal for its validate and capture code
(beside hpadvise.api.face for the core): the server handle's base and helpers, the
benchmark drivers, the buffers validate follows, and the journal a capture writes its changes
to, as apply does. Re-exported, not redefined."""

from hpadvise.act.face import journal, refuse_stacked

from .options import followed
from .pgbench import Pgbench, Run
from .sysbench import Sysbench
from .target import (BenchTarget, ScratchServer, check_run, free_port, mark_scratch, need_binary,
                     own_copy, owned_tmpdir, run_as, wait_gone)

__all__ = ["BenchTarget", "Pgbench", "Run", "ScratchServer", "Sysbench", "check_run", "followed",
           "free_port",
           "journal", "mark_scratch", "need_binary", "own_copy", "owned_tmpdir",
           "refuse_stacked", "run_as", "wait_gone"]
