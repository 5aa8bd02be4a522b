"""``python -m vllm_sim``."""

import sys

from . import main

sys.exit(main())
