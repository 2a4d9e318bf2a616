"""The driver-manager flow, its Kubernetes client and kubeconfig reader, the Node report."""
