"""The workspace's scheduler process: ``python -m phalanx.jobs.schedulerd``.

Its rounds are :class:`phalanx.scheduler.daemon.Scheduler`'s; what a round
needs done to jobs (recover a lost supervisor, start one) is the jobs layer's,
handed in as the scheduler's keeper, so the scheduler never imports the layer
above it. Started by phalanx itself when none runs
(:func:`phalanx.scheduler.process.ensure_running`).
"""

from __future__ import annotations

import sys

from phalanx.jobs import control
from phalanx.scheduler import daemon


def main() -> int:
    return daemon.main(control)


if __name__ == "__main__":
    sys.exit(main())
