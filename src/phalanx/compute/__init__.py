"""Where a job's nodes run: this machine now, a Ray cluster later."""

from phalanx.compute.local import LocalCompute, LocalNode

__all__ = ["LocalCompute", "LocalNode"]
