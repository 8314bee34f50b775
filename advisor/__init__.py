"""hpadvise: a database-focused huge page tuning advisor.

The core is cut into stages, one package each, in the order the data flows; a module imports
only from its own stage and the ones before it (tests/unit/test_layout.py holds it so):

- kit: small helpers every stage may use (errors, sizes, locks, redaction, finding codes)
- facts: the host's facts and their readers (/proc, /sys, /etc, boot configuration, cgroups,
  NUMA, processes, THP's rules per mapping)
- changes: actions with get/set/verify/restore
- api: the engine API (the report's model, profiles, Engine and its registry)
- ledger: the journal's store
- nextboot: what each knob is at the next boot, who sets it, where apply persists it
- planning: the plan, from the host and the instances
- act: apply and rollback
- outputs: report, metrics, fleet, manifests, snapshots
- cli: the commands

Engines (hpadvise.plugins) and validate's machinery (hpadvise.benchmarks) stand above them.
"""

STAGES = ("kit", "facts", "changes", "api", "ledger", "nextboot", "planning", "act", "outputs",
          "cli")
