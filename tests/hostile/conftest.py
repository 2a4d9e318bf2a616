from __future__ import annotations

import sys
from pathlib import Path

# hostenv.py is shared with tests/faults.
sys.path.insert(0, str(Path(__file__).resolve().parent))
