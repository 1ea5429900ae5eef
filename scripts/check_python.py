"""Fail early, with a clear message, when the interpreter is too old for the project."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 - runs under whatever python3 is first
    sys.exit(f"executor needs Python >= 3.11; {sys.executable} is {sys.version.split()[0]}")
