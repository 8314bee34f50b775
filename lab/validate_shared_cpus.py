#!/usr/bin/env python3
"""An experiment, not a mode of validate: a simultaneous validate run whose servers are left
on every CPU instead of each pinned to its own (Options.pin_cpus False), to see whether the
round-to-round spread of a pinned run comes from the two vCPUs' speeds and cancels when both
servers share both. lab/README.md ("Both servers on both CPUs") has the result: it does not.

    python3 lab/validate_shared_cpus.py 900 8GB > result.json     # seconds, buffers
"""

import json
import sys

from hpadvise.benchmarks.options import Options
from hpadvise.benchmarks.runner import Validation

if __name__ == "__main__":
    seconds, buffers = int(sys.argv[1]), sys.argv[2]
    v = Validation(Options(variants=["current", "current"], duration_s=seconds, db="postgres",
                           workload="select", clients=16, buffers=buffers,
                           design="simultaneous", pin_cpus=False),
                   on_update=lambda s: print(s.phase, file=sys.stderr))
    v.run()
    print(json.dumps(v.result(), indent=2, default=str))
