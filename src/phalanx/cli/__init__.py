"""The ``phalanx`` command: one module per command group, thin over the packages."""
