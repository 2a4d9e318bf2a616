from __future__ import annotations

import sys
from pathlib import Path

# targets.py is shared with bench/fuzz.py; make it importable as ``targets``.
sys.path.insert(0, str(Path(__file__).resolve().parent))
