"""Placeholder: commands are added by the module's owner."""
