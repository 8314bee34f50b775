"""hpadvise's command line: one module per command group, each parsing its options and
calling one core function; `main` is the console script. The groups register their commands
in the order `hpadvise --help` lists them."""

from . import inspecting, changing, validating, capturing, sizing, fleet, probing, info, thp, manual  # noqa: F401,I001,E501
from .app import app, main  # noqa: F401
