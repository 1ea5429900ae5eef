"""First-party macOS sandbox backend: Seatbelt profiles run through ``/usr/bin/sandbox-exec``.

``profile`` renders a ``RuleSet`` (pure, testable anywhere), ``plugin`` registers the backend
and builds the launch. See docs/macos.md.
"""
