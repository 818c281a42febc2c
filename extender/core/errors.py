"""The one base of the extender's own errors.

Every error the extender raises on purpose (bad configuration, a bad quantity,
a malformed request, a snapshot it cannot read, a failed bind) derives from
``ExtenderError``: the CLI turns any of them into one line and exit code 2, the
server into a 4xx answer. Anything else is a bug and keeps its traceback.
Each subclass lives in the module of the layer that raises it.
"""

from __future__ import annotations


class ExtenderError(Exception):
    """An error the extender reports to its user, not a bug."""
