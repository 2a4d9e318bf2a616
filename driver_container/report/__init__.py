"""``nvidia-driver bug-report``: one bounded, secret-free archive of what support asks for (docs/bug-report.md)."""
