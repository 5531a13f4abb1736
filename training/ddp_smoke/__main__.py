"""``python -m ddp_smoke``: the command line of ``ddp_smoke.cli``."""

from __future__ import annotations

import os
import sys

from ddp_smoke.cli import main

if __name__ == "__main__":
    code = main()
    if code and sys.argv[1:2] == ["run"]:
        # A rank that failed after a collective timed out leaves the process
        # group's C++ threads behind; Python's exit then aborts in their
        # destructors ("terminate called without an active exception",
        # SIGABRT) and the rank's status 1 became -6. Its rank file and its
        # FAIL line are written: leave without running them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
