# What hpadvise's modules share: DOCUMENTATION (the executable option, the requirement and the
# platform attribute) for every module, PROFILE for those that build a plan (used as
# hpadvise.hugepages.hpadvise.profile).


class ModuleDocFragment:
    DOCUMENTATION = r"""
requirements:
  - hpadvise on the managed host (its C(hpadvise) command; see O(executable))
attributes:
  platform:
    platforms: posix
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
