"""``python -m ddp_smoke``: the command line of ``ddp_smoke.cli``."""

from __future__ import annotations

import sys

from ddp_smoke.cli import main

if __name__ == "__main__":
    sys.exit(main())
