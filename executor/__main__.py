"""``python -m executor`` is the same as the ``executor`` command."""

from executor.cli import main

raise SystemExit(main())
