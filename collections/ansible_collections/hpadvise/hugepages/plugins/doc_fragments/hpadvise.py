# The options hpadvise's modules share: DOCUMENTATION for every module, PROFILE for those that
# build a plan (used as hpadvise.hugepages.hpadvise.profile).


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  executable:
    description: Path of the hpadvise command on the managed host.
    type: str
    default: hpadvise
"""

    PROFILE = r"""
options:
  profile:
    description: Profile name or .toml path on the managed host.
    type: str
    default: oltp
"""
