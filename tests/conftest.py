"""Settings of every test layer."""

from __future__ import annotations

import os

# Stored analyses (fxls.engine.store) of one test's server must not show up first in another
# test's: off for every server the tests start; the store's own tests turn it on.
os.environ.setdefault("FXLS_STORE", "0")
