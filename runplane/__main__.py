"""``python -m runplane`` is the ``runplane`` command."""

from runplane.cli import main

raise SystemExit(main())
