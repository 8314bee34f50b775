#!/usr/bin/python
# hpadvise.hugepages.check: run `hpadvise check --json` on the host and return it as facts.

DOCUMENTATION = r"""
module: check
author: hpadvise developers (@hpadvise)
short_description: Audit a host's huge pages with hpadvise (changes nothing)
description:
  - Runs C(hpadvise check --json) on the managed host and returns the report as C(report)
    (register the task), in the schema hpadvise documents in docs/json-schema.md; also as the
    fact C(hpadvise), for playbooks that use it. It never changes the
    host, so it is safe in check mode and always reports C(changed=false).
  - Fails when the report's worst finding reaches O(fail_on).
extends_documentation_fragment:
  - hpadvise.hugepages.hpadvise
  - hpadvise.hugepages.hpadvise.profile
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: "It changes nothing, in check mode or not."
  diff_mode:
    support: none
    details: "It changes nothing, so there is nothing to show."
seealso:
  - module: hpadvise.hugepages.apply
  - module: hpadvise.hugepages.rollback
options:
  db:
    description: Only these engines (postgres, mysql, jvm, ...); default every installed one.
    type: list
    elements: str
  fail_on:
    description: Fail when a finding is this severe or worse.
    type: str
    choices: [none, warn, crit]
    default: none
"""

EXAMPLES = r"""
- name: Audit huge pages
  hpadvise.hugepages.check:
    db: [postgres, mysql]
  register: audit
- name: Keep the report
  ansible.builtin.copy:
    content: "{{ audit.report | to_nice_json }}"
    dest: "reports/{{ inventory_hostname }}.json"
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: The check report (docs/json-schema.md of hpadvise).
  returned: success
  type: dict
worst:
  description: The worst finding's severity (ok, info, warn, crit).
  returned: success
  type: str
errors:
  description: Input errors hpadvise reported (they fail the task).
  returned: always
  type: list
  elements: str
ansible_facts:
  description: C(hpadvise), the check report.
  returned: success
  type: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule

SEVERITIES = ["ok", "info", "warn", "crit"]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            executable=dict(type="str", default="hpadvise"),
            db=dict(type="list", elements="str"),
            profile=dict(type="str", default="oltp"),
            fail_on=dict(type="str", default="none", choices=["none", "warn", "crit"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    cmd = [p["executable"], "check", "--json", "--profile", p["profile"]]
    for d in p["db"] or []:
        cmd += ["--db", d]
    rc, out, err = module.run_command(cmd)
    try:
        report = json.loads(out)
    except ValueError:
        module.fail_json(msg=f"hpadvise check failed (rc {rc}): {err.strip() or out[:300]}")
    worst = report.get("summary", {}).get("worst", "ok")
    # the report as a registered result (`register:` then `.report`), and as the fact
    # `hpadvise` for playbooks written before (ansible-core deprecates injected facts)
    result = dict(changed=False, report=report, ansible_facts={"hpadvise": report},
                  worst=worst, errors=report.get("errors", []))
    if rc == 2:
        module.fail_json(msg="hpadvise check: " + "; ".join(report.get("errors") or [err]),
                         **result)
    if p["fail_on"] != "none" and SEVERITIES.index(worst) >= SEVERITIES.index(p["fail_on"]):
        module.fail_json(msg=f"worst finding is {worst}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
