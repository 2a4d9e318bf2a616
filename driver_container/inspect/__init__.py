"""Read-only view of the host: platform, loaded modules, module files, userspace, firmware, parameters -> HostState."""
