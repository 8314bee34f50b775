#!/usr/bin/python
# hpadvise.hugepages.apply: apply hpadvise's plan; check mode is its dry run.

DOCUMENTATION = r"""
module: apply
author: hpadvise developers (@hpadvise)
short_description: Apply hpadvise's huge page plan (pools, THP, persistence, server settings)
description:
  - Runs C(hpadvise apply --yes --json) on the managed host. In check mode it runs
    C(hpadvise apply --dry-run --json) instead and changes nothing.
  - C(changed) is true only when a knob or file was (or, in check mode, would be) changed; a
    second run on a host that already matches the plan reports C(changed=false).
  - With C(--diff), every knob and file shows its before and after.
  - Every apply is journaled on the host; M(hpadvise.hugepages.rollback) undoes it.
extends_documentation_fragment:
  - hpadvise.hugepages.hpadvise
  - hpadvise.hugepages.hpadvise.profile
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: "The plan as a dry run: C(hpadvise apply --dry-run), nothing changed."
  diff_mode:
    support: full
    details: "Every knob's and file's before and after."
seealso:
  - module: hpadvise.hugepages.check
  - module: hpadvise.hugepages.rollback
options:
  db:
    description: Engines to apply for (postgres, mysql, jvm, ..., or all).
    type: list
    elements: str
    required: true
  instance:
    description: Instances to apply for (ID, data directory or port).
    type: list
    elements: str
  restart:
    description: Restart the instances so that they take their huge pages now.
    type: bool
    default: false
  persist:
    description: Make the changes survive a reboot.
    type: bool
    default: true
  journal_dir:
    description: The journal directory on the managed host (default hpadvise's).
    type: str
"""

EXAMPLES = r"""
- name: Put PostgreSQL on huge pages
  hpadvise.hugepages.apply:
    db: [postgres]
    instance: ["5432"]
    restart: true
"""

RETURN = r"""
status:
  description: ok, nothing, shortfall, restart-failed or failed (dry run in check mode).
  returned: always
  type: str
journal:
  description: The apply's ID, for rollback.
  returned: always
  type: str
changes:
  description: Each change with target, before, after and status.
  returned: always
  type: list
"""

import json

from ansible.module_utils.basic import AnsibleModule


def _diff(changes):
    before, after = [], []
    for c in changes:
        b, a = c.get("before"), c.get("after")
        if c.get("kind") == "file":
            before.append(f"# {c['target']}\n{b or '(absent)'}\n")
            after.append(f"# {c['target']}\n{a if a is not None else '(removed)'}\n")
        else:
            before.append(f"{c['target']} = {b if c.get('before_unknown') is None else '?'}\n")
            after.append(f"{c['target']} = {a}\n")
    return {"before": "".join(before), "after": "".join(after),
            "before_header": "now", "after_header": "hpadvise plan"}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            executable=dict(type="str", default="hpadvise"),
            db=dict(type="list", elements="str", required=True),
            instance=dict(type="list", elements="str"),
            profile=dict(type="str", default="oltp"),
            restart=dict(type="bool", default=False),
            persist=dict(type="bool", default=True),
            journal_dir=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    cmd = [p["executable"], "apply", "--json", "--profile", p["profile"]]
    for d in p["db"]:
        cmd += ["--db", d]
    for i in p["instance"] or []:
        cmd += ["--instance", i]
    if p["journal_dir"]:
        cmd += ["--journal-dir", p["journal_dir"]]
    if not p["persist"]:
        cmd.append("--no-persist")
    if module.check_mode:
        cmd.append("--dry-run")
    else:
        cmd.append("--yes")
        if p["restart"]:
            cmd.append("--restart")
    rc, out, err = module.run_command(cmd)
    try:
        res = json.loads(out)
    except ValueError:
        module.fail_json(msg=f"hpadvise apply failed (rc {rc}): {err.strip() or out[:300]}")
    changes = res.get("changes", [])
    if module.check_mode:
        changed = bool(changes)
    else:
        changed = any(c.get("status") == "done" for c in changes)
    result = dict(changed=changed, status=res.get("status", "dry-run"),
                  journal=res.get("journal"), changes=changes,
                  notices=res.get("notices", []), next_boot=res.get("next_boot", []),
                  restart_needed=res.get("restart_needed", []))
    if module._diff:
        result["diff"] = _diff(changes)
    if rc != 0 or res.get("status") not in (None, "ok", "nothing"):
        module.fail_json(msg="hpadvise apply: " + ("; ".join(res.get("problems") or [])
                                                   or err.strip()), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
