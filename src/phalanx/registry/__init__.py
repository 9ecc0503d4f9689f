"""The model registry: named, immutable model versions kept in the workspace."""

from phalanx.registry.files import ModelFile
from phalanx.registry.models import (
    ModelVersion,
    check_name,
    download_model,
    get_model,
    list_models,
    register_model,
)

__all__ = [
    "ModelFile",
    "ModelVersion",
    "check_name",
    "download_model",
    "get_model",
    "list_models",
    "register_model",
]
