"""First-party Linux sandbox backend: Landlock + seccomp, with namespaces where allowed."""
