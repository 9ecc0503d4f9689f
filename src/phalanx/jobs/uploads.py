"""Copying upload-mode outputs to their datastores while a job runs."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from phalanx.jobs.prepare import UPLOAD_INTERVAL_S, Prepared

log = logging.getLogger(__name__)

UPLOAD_REQUEST = "upload.request"
"""A file in the job's folder; a rank creates or touches it to ask for an upload now."""


class UploadLoop:
    """Uploads every ``interval`` seconds, and soon after a rank asks; stopped with :meth:`stop`.

    Args:
        prepared: The job's prepared outputs.
        request: The file whose appearance asks for an upload.
        interval: Seconds between uploads when nobody asks.
    """

    def __init__(
        self, prepared: Prepared, request: Path, interval: float = UPLOAD_INTERVAL_S
    ) -> None:
        self._prepared = prepared
        self._request = request
        self._interval = interval
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if prepared.uploads:
            self._thread = threading.Thread(target=self._loop, name="uploads", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        waited = 0.0
        seen = self._stamp()
        while not self._stopped.wait(0.5):
            waited += 0.5
            # Asked: the file appeared or was touched again. (It is not removed: a
            # walled-off job cannot make files in its folder, so it is made for it.)
            stamp = self._stamp()
            if stamp != seen or waited >= self._interval:
                seen, waited = stamp, 0.0
                self.sync_now()

    def _stamp(self) -> int | None:
        try:
            return os.stat(self._request).st_mtime_ns
        except OSError:
            return None

    def sync_now(self) -> None:
        """Upload what changed, now (uploads of one folder never overlap)."""
        try:
            self._prepared.upload()
        except Exception:
            # A bug here must not end the job: its files stay local and the next sync retries.
            log.exception("uploading outputs failed")

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
