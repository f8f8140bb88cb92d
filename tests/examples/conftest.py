"""The examples' own modules are imported as their scripts import each other: from the example's folder."""

from __future__ import annotations

import sys
from pathlib import Path

SPIDER = Path(__file__).resolve().parents[2] / "examples" / "spider"
if str(SPIDER) not in sys.path:
    sys.path.insert(0, str(SPIDER))
