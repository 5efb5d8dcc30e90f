"""``python -m eagle_hal``: the ``eagle-hal`` command line."""

import sys

from eagle_hal.cli import main

sys.exit(main())
