"""``python -m calibrate <command>``: :mod:`calibrate.cli`."""
from __future__ import annotations

import sys

from calibrate.cli import main

if __name__ == "__main__":
    sys.exit(main())
