#!/usr/bin/env python3
"""An experiment, not a mode of validate: `hpadvise validate` with the simultaneous design's
servers left on every CPU instead of each pinned to its own (validate's CPU groups replaced
by "no pinning"), to see whether the round-to-round spread of a pinned run comes from the two
vCPUs' speeds and cancels when both servers share both. benchmarks/README.md ("Both servers
on both CPUs") has the result: it does not.

    python3 scripts/validate_shared_cpus.py --duration 15m --shared-buffers 8GB \\
        --workload select --clients 16 --variants current,current --design simultaneous
"""

import sys

from hpadvise import cli
from hpadvise.benchmarks import runner

if __name__ == "__main__":
    runner._cpu_groups = lambda n: [None] * n  # None: the job runs wherever the kernel puts it
    sys.argv = ["hpadvise", "validate", *sys.argv[1:]]
    cli.main()
