"""The sandbox network: the executor-run proxy and the private network namespaces it serves."""
