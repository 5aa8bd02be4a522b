"""``python -m orchestration.sim``."""

import sys

from . import main

sys.exit(main())
