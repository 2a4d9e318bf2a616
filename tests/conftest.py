from __future__ import annotations

import sys
from pathlib import Path

# Make tests/support.py importable as ``support`` from every test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))
