"""`hpadvise k8s` manifests as Kubernetes and CloudNativePG read them, on a captured host: the
resources block inside a Pod and the DaemonSet against the Kubernetes schema
(kubernetes-validate), the CloudNativePG Cluster against the CRD's own schema (a fixture taken
from the cloudnative-pg repository)."""

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support import run_cli

CRD = json.loads((Path(__file__).resolve().parent.parent / "fixtures/k8s/cnpg-cluster-schema.json")
                 .read_text())
K8S = "1.30.0"  # a Kubernetes release with hugepages-<size> resources stable (GA in 1.14)


def _k8s(hosts, *args):
    r = run_cli("k8s", "--root", str(hosts / "pg-hugetlb"), "--db", "postgres", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_resources_block_is_a_valid_container_spec(hosts):
    docs = list(yaml.safe_load_all(_k8s(hosts)))
    assert len(docs) == 2  # the tree's two clusters
    for doc in docs:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pg"},
               "spec": {"containers": [{"name": "postgres", "image": "postgres:15", **doc}]}}
        kubernetes_validate.validate(pod, K8S, strict=True)
    bad = json.loads(json.dumps(pod))  # a field Kubernetes does not know fails, strictly
    res = bad["spec"]["containers"][0]["resources"]
    res["limit"] = res.pop("limits")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S, strict=True)


def test_cloudnative_pg_cluster_validates_against_the_crd(hosts):
    text = _k8s(hosts, "--manifest", "operator")
    clusters = list(yaml.safe_load_all(text))
    assert len(clusters) == 2
    for cluster in clusters:
        jsonschema.validate(cluster, CRD)
        params = cluster["spec"]["postgresql"]["parameters"]
        assert params["huge_pages"] == "on"  # a string, not YAML 1.1's boolean
        res = cluster["spec"]["resources"]
        assert res["requests"] == res["limits"] and "hugepages-2Mi" in res["limits"]
    # what people wrote by hand before: an unquoted on is a boolean the CRD rejects
    unquoted = yaml.safe_load(text.split("---")[0].replace('huge_pages: "on"', "huge_pages: on"))
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'string'"):
        jsonschema.validate(unquoted, CRD)


def test_daemonset_validates_and_sees_the_node(hosts):
    r = run_cli("k8s", "--manifest", "daemonset", "--image", "registry.example/hpadvise:0.1")
    assert r.returncode == 0, r.stderr
    ds = yaml.safe_load(r.stdout)
    kubernetes_validate.validate(ds, K8S, strict=True)
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    [c] = spec["containers"]
    assert c["image"] == "registry.example/hpadvise:0.1"
    assert "check --format prometheus" in c["command"][-1]
    assert {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]} == \
        {"/sys": True, "/sys/fs/cgroup": True, "/textfile": False}
    r = run_cli("k8s", "--manifest", "daemonset", "--json")
    assert json.loads(r.stdout) == yaml.safe_load(run_cli("k8s", "--manifest",
                                                           "daemonset").stdout)


def test_the_daemonsets_failed_check_still_reaches_prometheus(tmp_path):
    """Its loop's check, run as written with /textfile here: a check that fails (exit 2, a
    server it cannot reach) still leaves hpadvise.prom with hpadvise_check_success 0, for
    the alert docs/prometheus.md gives, and no temporary file."""
    import re
    import shlex
    ds = yaml.safe_load(run_cli("k8s", "--manifest", "daemonset").stdout)
    [c] = ds["spec"]["template"]["spec"]["containers"]
    body = re.search(r"do (.*?); sleep", c["command"][-1])[1]
    argv = [a.replace("/textfile", str(tmp_path)) for a in shlex.split(body)]
    assert argv[0] == "hpadvise", body
    r = run_cli(*argv[1:], "--db", "postgres", "--dsn", "postgresql://nobody@127.0.0.1:1/x")
    assert r.returncode == 2, r.stderr
    fams = {f.name: f for f in text_string_to_metric_families(
        (tmp_path / "hpadvise.prom").read_text())}
    assert [s.value for s in fams["hpadvise_check_success"].samples] == [0]
    assert [p.name for p in tmp_path.iterdir()] == ["hpadvise.prom"]


@pytest.mark.parametrize("image", ["", " ", "registry.example/a b:1"])
def test_a_daemonset_without_an_image_reference_is_bad_input(image):
    r = run_cli("k8s", "--manifest", "daemonset", "--image", image)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.count("\n") == 1 and "not an image reference" in r.stderr, r.stderr
