"""Where the tests find the read-only corpora: `QKV_DATA_DIR` if set, else `shared/data` beside
the project's folder (`../shared/data`, as CI lays it out). Tests that need them skip without."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA = Path(
    os.environ.get("QKV_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data"
)
