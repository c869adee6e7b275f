"""``python -m pytest_specperf.sim``: run the SGLang-compatible simulator."""

from .app import main

raise SystemExit(main())
