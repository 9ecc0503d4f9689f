"""Sharded datasets: the converter, the streaming loader and image transforms."""
