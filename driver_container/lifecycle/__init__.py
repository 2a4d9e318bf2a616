"""init / load / unload: the order of steps, the module wait, the peermem sidecar commands.

Kept empty: ``probe_nvidia_peermem`` imports ``lifecycle.peermem`` on its hot path."""
