"""First-party Windows backend: refuses sandboxed launches, before anything runs."""
