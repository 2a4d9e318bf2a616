from __future__ import annotations

import sys
from pathlib import Path

# The fixture-host helper lives with the hostile-input tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hostile"))
