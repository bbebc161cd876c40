"""One run of a paper check, in its own process: ``python -m hybrid.reproduce._one CONFIG``.

CONFIG is a JSON file of ``TrainConfig`` fields; the run writes its directory (``out``),
summary.json included, and the parent reads that. One process per run keeps the runs of
``--jobs N`` apart and each on one torch thread.
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    from hybrid.reproduce.run import train_one

    with open(path) as f:
        train_one(json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
