"""Where the verbs other than ``job`` go; moved to :mod:`phalanx.client.backends`
so the SDK calls the same ones. Kept for the CLI's imports."""

from phalanx.client.backends import data_assets, datastores, models, remote, targets

__all__ = ["data_assets", "datastores", "models", "remote", "targets"]
