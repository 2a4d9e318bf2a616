from __future__ import annotations

import sys
from pathlib import Path

# fuzz_targets.py and fuzz_mutate.py are shared with bench/fuzz.py; make them importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))
# The fixture-host helper (hostenv) lives with the hostile-input tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "hostile"))
