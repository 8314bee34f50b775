"""--instance takes a cluster as its packaging names it: Debian's clusters are "15/main" (and
"main" alone where one version has it) beside their ID, data directory and port; a name two
clusters share is refused with both IDs."""

import shutil

import pytest

from hpadvise.facts.sysroot import SysRoot
from hpadvise.kit.errors import InputError
from hpadvise.planning.pipeline import inspect, select


def test_debian_cluster_names(hosts):
    r = inspect(SysRoot(hosts / "pg-hugetlb"), engine_names=["postgres"])
    for name in ("15/main", "main", "5432", "postgres:5432"):
        assert [i.id for i in select(r, ["postgres"], [name])] == ["postgres:5432"], name
    with pytest.raises(InputError, match="no postgres instance '16/main'"):
        select(r, ["postgres"], ["16/main"])


def test_a_name_two_versions_share_is_refused(hosts, tmp_path):
    root = tmp_path / "t"
    shutil.copytree(hosts / "pg-hugetlb", root, symlinks=True)
    r = inspect(SysRoot(root), engine_names=["postgres"])
    other = next(i for i in r.instances if i.id != "postgres:5432")
    other.state.config_file = "/etc/postgresql/16/main/postgresql.conf"  # a second "main"
    assert [i.id for i in select(r, ["postgres"], ["16/main"])] == [other.id]
    with pytest.raises(InputError, match="names 2 instances"):
        select(r, ["postgres"], ["main"])
