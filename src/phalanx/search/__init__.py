"""Hyperparameter search for sweep jobs, on Optuna.

``space`` turns a sweep's search space into Optuna's distributions and back
into the values a trial's command gets; ``policies`` holds the early
termination policies (Azure ML's bandit, median stopping and truncation
selection as Optuna pruners, and Optuna's own successive halving and
Hyperband); ``study`` builds the sampler and the study, and rebuilds a study
from a sweep's trial records so a restarted controller goes on where the last
one stopped. Nothing here reads the database or starts a job: the sweep's
controller (:mod:`phalanx.jobs.sweeps`) does. Optuna is imported only here.
"""
