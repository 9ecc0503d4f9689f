"""Ray's fake multi-node provider, with nodes that can be taken away (for the tests).

A cloud's API stops listing a spot VM once it has evicted it, and Ray's autoscaler
then starts another for the demand that is left. Ray's fake provider
(``fake_multinode``) lists a node until the autoscaler itself ends it, and never
ends one whose raylet died (its nodes stay "uninitialized" to the autoscaler's
liveness check). :class:`EvictableProvider` is that provider, except that a
worker node whose raylet has died is no longer listed: its remaining processes
are ended and the autoscaler sees the node gone, as it would on a cloud. Used as
``provider: {type: external, module: phalanx.bench.spotprovider.EvictableProvider}``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider

log = logging.getLogger(__name__)


class EvictableProvider(FakeMultiNodeProvider):
    """Fake nodes that are gone once their raylet is."""

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        with self.lock:
            for node_id, entry in list(self._nodes.items()):
                node: Any = entry.get("node")
                if node_id == self._head_node_id or node is None or _raylet_alive(node):
                    continue
                log.info("node %s lost its raylet: taken away", node_id)
                del self._nodes[node_id]
                with contextlib.suppress(Exception):
                    node.kill_all_processes(check_alive=False, allow_graceful=False)
            return list(super().non_terminated_nodes(tag_filters))


def _raylet_alive(node: Any) -> bool:
    from ray._private import ray_constants

    raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
    return any(info.process.poll() is None for info in raylets)
