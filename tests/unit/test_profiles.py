import pytest

from hpadvise.api import profiles
from hpadvise.api.engines import registry
from hpadvise.kit.errors import InputError


def load(tmp_path, text):
    p = tmp_path / "p.toml"
    p.write_text(text)
    return profiles.load(str(p), registry.profile_schemas())


def test_shipped_profiles_load():
    assert "oltp" in profiles.shipped()
    for name in profiles.shipped():
        p = profiles.load(name, registry.profile_schemas())
        assert p.name == name and p.description


def test_oltp_values():
    p = profiles.load("oltp", registry.profile_schemas())
    assert p.thp == {"enabled": "madvise", "defrag": "madvise", "shmem_enabled": "never"}
    assert p.engine("postgres")["huge_pages"] == "on"
    assert p.os_floor(24 << 30) == int((24 << 30) * 0.2)
    assert p.os_floor(4 << 30) == 2 << 30


@pytest.mark.parametrize("text,msg", [
    ('name = "x"\nbogus = 1\n', "unknown key 'bogus'"),
    ('name = "x"\n[pool]\nheadroom_pct = "lots"\n', "pool.headroom_pct must be a number"),
    ('name = "x"\n[thp]\nenabled = "sometimes"\n', "is not one of"),
    ('name = "x"\n[nope]\na = 1\n', "unknown section [nope]"),
    ('name = "x"\n[pool]\nos_floor = "12XB"\n', "is not a size"),
    ('name = "x"\n[postgres]\nhuge_pages = true\n', "postgres.huge_pages must be a str"),
    ('description = "no name"\n', "missing key 'name'"),
    ('name = "x"\n[pool\n', "not valid TOML"),
])
def test_bad_profiles(tmp_path, text, msg):
    with pytest.raises(InputError, match=None) as e:
        load(tmp_path, text)
    assert msg in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_profile_name():
    with pytest.raises(InputError, match="no profile named 'nope'"):
        profiles.load("nope")


def test_the_defaults_a_profile_file_leaves_to_hpadvise_are_documented():
    """docs/check.md names each built-in default (what a key a profile file leaves out
    takes), as the schema holds it, and that `name` is required."""
    from pathlib import Path

    from hpadvise.api.profiles import SCHEMA
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "check.md").read_text()
                   .split())
    assert "a file needs `name`" in doc
    for section, keys in SCHEMA.items():
        for key, spec in keys.items():
            if section and spec[2] is not None:
                assert f"`{key}` = `{spec[2]}`" in doc, (section, key, spec[2])
