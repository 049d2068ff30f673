"""``python -m custom_scheduler`` is the ``custom-scheduler`` command."""

from custom_scheduler.cli import main

raise SystemExit(main())
