"""The engines' entry points and hpadvise's version, read from the distributions' metadata
directly, agree with importlib.metadata on this install and on a third-party distribution."""

import importlib.metadata as md
import sys

from hpadvise.facts import dists
from hpadvise.api.engines import registry


def test_agrees_with_importlib_metadata_on_this_install():
    ours = sorted((e.name, e.value) for e in dists.entry_points(registry.GROUP))
    eps = md.entry_points()  # Python 3.9: a dict by group; 3.10 and later select by group=
    eps = eps.select(group=registry.GROUP) if hasattr(eps, "select") else eps.get(
        registry.GROUP, ())
    # (a set: Python 3.9 lists an entry point once per copy of the distribution on sys.path)
    theirs = sorted({(e.name, e.value) for e in eps})
    assert ours == theirs and ("postgres", "hpadvise.plugins.postgres:PostgresEngine") in ours
    assert dists.version("hpadvise") == md.version("hpadvise")
    assert dists.version("Typer") == md.version("typer")  # names compare normalised


def test_a_third_party_engine_distribution(tmp_path, monkeypatch):
    info = tmp_path / "hp_acme-2.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hp-acme\nVersion: 2.1.0\n\n"
                                   "Version: not a header\n")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\nacme = acme.cli:main\n\n"
        "[hpadvise.engines]\n# a comment\nacme = acme_engine.impl:AcmeEngine [extra]\n")
    pkg = tmp_path / "acme_engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "impl.py").write_text("class AcmeEngine:\n    name = 'acme'\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    [ep] = [e for e in dists.entry_points(registry.GROUP) if e.name == "acme"]
    assert (ep.value, ep.dist) == ("acme_engine.impl:AcmeEngine", "hp-acme")
    assert ep.load().name == "acme"
    assert dists.version("hp.acme") == "2.1.0"
    assert dists.version("no-such-distribution") is None
    assert md.version("hp-acme") == "2.1.0"  # the same directory importlib.metadata reads
