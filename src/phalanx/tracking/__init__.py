"""MLflow tracking on phalanx's records: an MLflow run is a phalanx job.

The run's id is the job's name, its experiment the job's ``experiment_name``,
its metrics the job's metrics (one store with ``phalanx.train.log_metric``), its
params and tags events in the job's folder, its artifacts the job's outputs.
The MLflow REST API over that model is :mod:`.protocol`; it is served beside a
job's ranks by :mod:`.sidecar` (so ``mlflow.log_metric`` needs no set-up in a
job) and by the team server for reading runs from outside.
"""
