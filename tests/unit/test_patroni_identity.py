"""Which Patroni cluster a change goes to: the DCS and namespace a member's configuration names
(read from a captured configuration, only its address keys), and apply's one change per
cluster, never one for two clusters that share a scope name."""

from pathlib import Path

from hpadvise.plugins.postgres.patroni import _dcs
from hpadvise.plugins.postgres.patroni_actions import PatroniParams

MEMBER = Path(__file__).resolve().parent.parent / "fixtures" / "hosts" / "overlays" / \
    "pg-patroni" / "etc" / "patroni" / "member1.yml"


def test_the_dcs_and_namespace_from_a_members_configuration():
    text = MEMBER.read_text()
    assert _dcs(text) == "etcd3:127.0.0.1:2379/service/"
    assert _dcs("namespace: /prod/\n" + text) == "etcd3:127.0.0.1:2379/prod/"
    other = text.replace("etcd3:\n  hosts: 127.0.0.1:2379", "consul:\n  host: 10.0.0.5:8500")
    assert _dcs(other) == "consul:10.0.0.5:8500/service/"
    assert _dcs("scope: x\nname: y\n") is None


def test_one_change_per_cluster_and_never_one_for_two():
    a = PatroniParams("http://127.0.0.1:8008", "demo", ["huge_pages"], "/etc/patroni/m1.yml",
                      "postgres:5432", dcs="etcd3:127.0.0.1:2379/service/")
    b = PatroniParams("http://127.0.0.1:8009", "demo", ["huge_pages"], "/etc/patroni/m2.yml",
                      "postgres:5433", dcs="etcd3:127.0.0.1:2379/service/")
    other = PatroniParams("http://127.0.0.1:8010", "demo", ["huge_pages"], "/etc/p/x.yml",
                          "postgres:5434", dcs="etcd3:127.0.0.1:2479/service/")
    assert a.identity() == b.identity() != other.identity()
    # a journal written before the DCS was recorded still reads back
    old = {k: v for k, v in a.spec().items() if k != "dcs"}
    assert PatroniParams.from_spec(old).identity() == \
        "patroni_params:None:demo:huge_pages"
    assert PatroniParams.from_spec(a.spec()).identity() == a.identity()
