"""Models from the literature, each with its non-equivariant baseline behind ``equivariant=False``."""

from ._group_vit import GroupViT
from ._gsa import GSANet
from ._registry import ModelSpec, create, get_spec, list_models, register_model
from ._swin import ShiftSwin
from ._twins import ShiftTwins
from ._vit import ShiftViT

__all__ = [
    "GSANet",
    "GroupViT",
    "ModelSpec",
    "ShiftSwin",
    "ShiftTwins",
    "ShiftViT",
    "create",
    "get_spec",
    "list_models",
    "register_model",
]
