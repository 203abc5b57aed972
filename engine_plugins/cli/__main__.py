"""``python -m engine_plugins.cli``: the ``engine-plugins`` command."""

import sys

from . import main

sys.exit(main())
