"""``hugepage-extender replay``: the extender's real decision code on a simulated cluster.

``add_parser(subparsers)`` registers the subcommand; ``run_replay(settings)``
is the API behind it (``quick_settings`` / ``full_settings`` build settings).
"""

from extender.replay.cli import add_parser
from extender.replay.model import ReplayError, ReplaySettings, Variant, parse_variant
from extender.replay.run import default_groups, full_settings, quick_settings, run_replay

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
