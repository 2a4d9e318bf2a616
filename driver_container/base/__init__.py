"""The floor every room stands on: records, the one exception hierarchy, non-fatal problems, the one
bounded read and its OSError boundary, reads below a root, and the host's roots (docs/architecture.md).
It imports nothing of the package above it, so the liveness probe's fast path can read through
``base.fileread`` without loading any room."""
