"""Runtime services: the one process runner, atomic contained writes, the pid lock, signals, status files."""
