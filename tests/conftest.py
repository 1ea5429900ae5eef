"""Suite-wide settings.

Hypothesis explores fresh random examples on every developer run, which is how it keeps
finding new cases. On CI (``.ci/run`` sets ``HYPOTHESIS_PROFILE=ci``) the examples are
derandomized: the same inputs every run, so a change lands or not on its own merits and
never on a lucky draw. A failure found locally becomes an ``@example`` in the test.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
