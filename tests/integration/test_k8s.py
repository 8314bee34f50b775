"""`hpadvise k8s`: pod resources for a real PostgreSQL cluster, checked against PostgreSQL's
own page count and the Kubernetes rules (hugepages request = limit, whole pages)."""

import re

import pytest
import yaml

from support import redis_server, run_cli

pytestmark = pytest.mark.integration


def test_8gb_cluster_gets_request_equal_limit_equal_its_exact_pages(pg_factory):
    c = pg_factory({"shared_buffers": "8GB", "huge_pages": "try"})
    n = int(c.postgres_C("shared_memory_size_in_huge_pages"))  # PostgreSQL's own count
    r = run_cli("k8s", "--pgdata", c.datadir, "--instance", c.datadir, "--pods", "3")
    assert r.returncode == 0, r.stderr
    [doc] = list(yaml.safe_load_all(r.stdout))
    res = doc["resources"]
    assert res["requests"]["hugepages-2Mi"] == res["limits"]["hugepages-2Mi"] == f"{n * 2}Mi"
    assert "memory" not in res["requests"]  # stopped: nothing measured, and it says so
    assert "add a memory request" in r.stdout
    # pasteable as a container's resources: no key Kubernetes does not know; the server's
    # own setting is a comment (it belongs in its configuration)
    assert list(doc) == ["resources"] and set(res) == {"requests", "limits"}
    assert re.search(r"^#   huge_pages = on$", r.stdout, re.M), r.stdout
    assert f"for 3 such pods (3 x {n} + headroom" in r.stdout
    # the same as data, valid against its schema
    import json
    from importlib import resources

    import jsonschema
    r = run_cli("k8s", "--pgdata", c.datadir, "--instance", c.datadir, "--pods", "3", "--json")
    assert r.returncode == 0, r.stderr
    [d] = json.loads(r.stdout)
    jsonschema.validate([d], json.loads((resources.files("hpadvise") / "schemas" / "k8s-schema.json")
                                        .read_text()))
    assert d["pages"] == {"2048": n} and d["resources"]["limits"]["hugepages-2Mi"] == f"{n * 2}Mi"
    # --pgdata alone names the cluster as --instance does: its resources only, not those of
    # the other servers running here (the host's own PostgreSQL, a second cluster)
    other = pg_factory({"shared_buffers": "64MB"})
    other.start()
    r = run_cli("k8s", "--pgdata", c.datadir, "--pods", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert [x["instance"] for x in json.loads(r.stdout)] == [d["instance"]], r.stdout


def test_running_cluster_gets_memory_and_bad_input_is_one_line(pg_factory):
    c = pg_factory({"shared_buffers": "64MB"})
    c.start()
    r = run_cli("k8s", "--db", "postgres", "--instance", str(c.port))
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    n = int(c.psql("SHOW shared_memory_size_in_huge_pages"))
    assert doc["resources"]["limits"] == {"hugepages-2Mi": f"{n * 2}Mi",
                                          "memory": doc["resources"]["requests"]["memory"]}
    assert doc["resources"]["requests"]["memory"].endswith("Mi")
    for args, needle in ((["--pods", "0"], "--pods"), (["--db", "oracle"], "oracle"),
                         (["--instance", "nosuch", "--db", "postgres"], "nosuch")):
        r = run_cli("k8s", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_a_server_thp_serves_is_told_it_needs_no_hugepages_resources(tmp_path):
    """A Redis takes no static huge pages: asked for its resources, k8s says so in one line
    (exit 2), not that this user cannot size it."""
    p = redis_server(tmp_path)
    iid = f"redis:{p.port}"
    try:
        r = run_cli("k8s", "--instance", iid)
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert r.stderr.strip().splitlines() == [
            f"hpadvise: error: {iid} takes no static huge pages (THP serves it): no "
            "hugepages-* resources to give; `hpadvise check` shows the THP advice"], r.stderr
    finally:
        p.kill()
        p.wait()
