"""``python -m engine_plugins.cli``: the ``engine-plugins`` command."""

import sys

from engine_plugins.cli import main

sys.exit(main())
