"""Node integration: device nodes, firmware search path, daemons."""
