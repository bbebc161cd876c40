"""``python -m hybrid.sweep SWEEP.yaml ...``: the same as ``hybrid sweep SWEEP.yaml ...``."""

import sys

from hybrid.sweep.command import sweep_command

sys.exit(sweep_command(sys.argv[1:]))
