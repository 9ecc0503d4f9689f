"""phalanx: self-hosted data-parallel distributed training.

This package is imported by every worker wrapper and CLI call, so it imports
nothing heavy (no torch) at module level.
"""

__version__ = "0.1.0"
