"""Running jobs: the runner state machine, its supervisor process, cancel."""
