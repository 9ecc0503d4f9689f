"""Asking phalanx to copy the job's upload-mode outputs to their datastores now."""

from __future__ import annotations

import os
from pathlib import Path

UPLOAD_REQUEST = "upload.request"  # phalanx.jobs.uploads.UPLOAD_REQUEST; train never imports jobs


def request_upload() -> bool:
    """Ask for an upload of the job's ``mode: upload`` outputs soon (within about a second).

    Call it after writing something worth keeping off the node, such as a
    checkpoint or an evaluation report. Any rank may call it; it returns at once.

    Returns:
        ``False`` outside a phalanx job (nothing to ask), else ``True``.
    """
    job_dir = os.environ.get("PHALANX_JOB_DIR")
    if not job_dir:
        return False
    Path(job_dir, UPLOAD_REQUEST).touch()
    return True
