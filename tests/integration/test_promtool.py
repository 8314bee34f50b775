"""Prometheus's own checker on what hpadvise exports and documents: `promtool check metrics`
(exposition format and naming lint) on check's metrics for captured hosts, and `promtool check
rules` on the alert rules docs/prometheus.md gives. promtool comes from Debian's prometheus
package, unpacked by scripts/test.sh ($HPADVISE_PROMTOOL)."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from support import REPO, run_cli

PROMTOOL = os.environ.get("HPADVISE_PROMTOOL", "/var/tmp/hpadvise-promtool/usr/bin/promtool")


@pytest.fixture(scope="module")
def promtool():
    if not os.access(PROMTOOL, os.X_OK):
        pytest.fail(f"promtool missing at {PROMTOOL}: scripts/test.sh unpacks Debian's "
                    "prometheus package there (or set HPADVISE_PROMTOOL)")
    return PROMTOOL


@pytest.mark.parametrize("state", ["pg-fallback", "pool-2m", "mariadb-jvm",
                                   "guests/amd64-2node-membind"])
def test_metrics_pass_promtool(hosts, promtool, state):
    """Captured host states; a guests/ one is a tree captured in a two-node guest."""
    tree = REPO / "tests" / "fixtures" / state if state.startswith("guests/") else hosts / state
    r = run_cli("check", "--format", "prometheus", "--root", str(tree))
    assert r.returncode == 0, r.stderr
    p = subprocess.run([promtool, "check", "metrics"], input=r.stdout, capture_output=True,
                       text=True)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), \
        p.stdout + p.stderr


def test_documented_alert_rules_pass_promtool(promtool, tmp_path):
    text = (REPO / "docs" / "prometheus.md").read_text()
    [rules] = re.findall(r"```yaml\n(.*?)```", text, re.S)
    f = tmp_path / "rules.yml"
    f.write_text(rules)
    p = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS: 2 rules found" in p.stdout, p.stdout + p.stderr
