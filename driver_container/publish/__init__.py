"""Select, plan and apply the published driver root."""
