"""Benchmarks: training throughput across a grid of jobs, and data loading.

``phalanx bench train`` runs the synthetic reference workload
(:mod:`phalanx.bench.workload`) as one real phalanx job per configuration of
nodes × processes and reports images/sec and scaling efficiency
(:mod:`phalanx.bench.grid` says what runs, :mod:`phalanx.bench.train` runs it,
:mod:`phalanx.bench.report` writes CSV, Markdown and a PNG chart, beside the
published figures of :mod:`phalanx.bench.anchors`; :mod:`phalanx.bench.record`
keeps the run in the workspace for the studio's ``/bench`` page). ``phalanx bench data``
times the data loader (:mod:`phalanx.bench.data`) from memory, local files and
an Azurite object store (:mod:`phalanx.bench.azurite`).

Nothing here is imported by training jobs except the workload itself, which
needs only torch and :mod:`phalanx.train`.
"""
