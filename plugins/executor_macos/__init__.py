"""First-party macOS sandbox backend: Seatbelt profiles run through sandbox-exec."""
