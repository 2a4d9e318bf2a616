"""The Kubernetes API client: endpoint, credentials, one bounded request, and the Node report."""
