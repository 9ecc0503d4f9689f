"""Constants of Azure ML's ``azure.ai.ml.constants`` that phalanx jobs use."""

from __future__ import annotations


class AssetTypes:
    """Types of inputs, outputs, data assets and models.

    phalanx reads ``uri_folder`` and ``uri_file`` inputs, writes those and
    ``custom_model`` outputs; the others are named so an error can say so.
    """

    URI_FILE = "uri_file"
    URI_FOLDER = "uri_folder"
    MLTABLE = "mltable"
    CUSTOM_MODEL = "custom_model"
    MLFLOW_MODEL = "mlflow_model"
    TRITON_MODEL = "triton_model"


class InputOutputModes:
    """How an input reaches the job, or how an output leaves it."""

    RO_MOUNT = "ro_mount"
    RW_MOUNT = "rw_mount"
    DOWNLOAD = "download"
    UPLOAD = "upload"
    DIRECT = "direct"
    EVAL_MOUNT = "eval_mount"
    EVAL_DOWNLOAD = "eval_download"


class JobType:
    """Job types; phalanx runs command jobs."""

    COMMAND = "command"


__all__ = ["AssetTypes", "InputOutputModes", "JobType"]
