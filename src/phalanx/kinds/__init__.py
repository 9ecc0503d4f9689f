"""phalanx's own compute kinds, one package each: :mod:`~phalanx.kinds.local` (this
machine) and :mod:`~phalanx.kinds.ray` (a Ray cluster). Each registers one
:class:`~phalanx.compute.kind.ComputeKind` in the ``phalanx.compute_kinds`` entry points,
as a plug-in's kind does (``docs/compute-kinds.md``); nothing imports them by name."""
