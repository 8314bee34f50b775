#!/usr/bin/python
# hpadvise.hugepages.rollback: undo an hpadvise apply exactly.

DOCUMENTATION = r"""
module: rollback
author: hpadvise developers (@hpadvise)
short_description: Undo an hpadvise apply (every knob and file back, restarts last)
description:
  - Runs C(hpadvise rollback --yes) on the managed host; in check mode
    C(hpadvise rollback --dry-run), which changes nothing.
  - C(changed) is false when there is nothing to roll back.
extends_documentation_fragment:
  - hpadvise.hugepages.hpadvise
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: "What would be restored: C(hpadvise rollback --dry-run)."
  diff_mode:
    support: none
    details: "Not shown; the result lists what was restored."
seealso:
  - module: hpadvise.hugepages.apply
  - module: hpadvise.hugepages.check
options:
  id:
    description: The apply to undo (see C(hpadvise history)); default the latest.
    type: str
  journal_dir:
    description: The journal directory on the managed host (default hpadvise's).
    type: str
"""

EXAMPLES = r"""
- name: Undo the last apply
  hpadvise.hugepages.rollback:
"""

RETURN = r"""
restored:
  description: What was (or, in check mode, would be) restored.
  returned: always
  type: list
"""

import json

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec=dict(
            executable=dict(type="str", default="hpadvise"),
            id=dict(type="str"),
            journal_dir=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    cmd = [p["executable"], "rollback"]
    if p["id"]:
        cmd.append(p["id"])
    if p["journal_dir"]:
        cmd += ["--journal-dir", p["journal_dir"]]
    cmd += ["--dry-run" if module.check_mode else "--yes", "--json"]
    rc, out, err = module.run_command(cmd)
    if rc == 2 and "nothing to roll back" in err:
        module.exit_json(changed=False, restored=[], msg=err.strip())
    if rc != 0:
        module.fail_json(msg=f"hpadvise rollback failed (rc {rc}): {err.strip() or out[:300]}")
    result = json.loads(out)  # hpadvise rollback --json
    restored = result["to_restore"] if module.check_mode else result["restored"]
    module.exit_json(changed=bool(restored), restored=restored, id=result["id"])


if __name__ == "__main__":
    main()
