"""``python -m replay``: the extender's real decision code on a simulated cluster.

A tool of the source tree beside ``benchmarks/``, outside the ``extender`` package that
the image ships (matplotlib, a quarter of the code, never runs in production).

``add_parser(subparsers)`` registers the subcommand; ``run_replay(settings)``
is the API behind it (``quick_settings`` / ``full_settings`` build settings).
"""

from replay.cli import add_parser
from replay.model import ReplayError, ReplaySettings, Variant, parse_variant
from replay.run import default_groups, full_settings, quick_settings, run_replay

__all__ = [
    "ReplayError",
    "ReplaySettings",
    "Variant",
    "add_parser",
    "default_groups",
    "full_settings",
    "parse_variant",
    "quick_settings",
    "run_replay",
]
