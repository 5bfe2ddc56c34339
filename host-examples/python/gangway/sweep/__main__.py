"""``python -m gangway.sweep GRID.toml``: see :func:`gangway.sweep.main`."""

import sys

from . import main

sys.exit(main())
