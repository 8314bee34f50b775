"""`size --json` of planned instances."""


def test_size_json_says_why_a_planned_release_is_unknown(monkeypatch):
    """A planned instance whose release could not be read: size --json gives the unknown
    object with its reason, as check's JSON does, never a crash or an empty string."""
    import json

    from hpadvise.api.engines import Demand, Instance
    from hpadvise.api.model import Report
    from hpadvise.kit.unknown import Unknown
    from hpadvise.outputs import whatif
    monkeypatch.setattr(whatif, "verdicts", lambda r: [])  # the pools: not this test's
    i = Instance("postgres", "postgres:planned", "planned PostgreSQL", False,
                 version=Unknown("the release of the planned PostgreSQL", "no answer",
                                 "--pg-bindir DIR"))
    i.demand = Demand(i.id, None, 2048, {2048: 10}, True, "test")
    r = Report.__new__(Report)
    r.instances, r.findings, r.changes, r.pools = [i], [], [], []
    out = json.loads(json.dumps(whatif.to_json(r), default=str))
    assert out["instances"][0]["version"] == {"unknown": "no answer", "supply": "--pg-bindir DIR"}
