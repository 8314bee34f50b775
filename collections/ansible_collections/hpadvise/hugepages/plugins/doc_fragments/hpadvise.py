# The options every hpadvise module shares.


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  executable:
    description: Path of the hpadvise command on the managed host.
    type: str
    default: hpadvise
"""
