"""Datastores, URI resolution, the node-local cache and transfers."""
