"""Models from the literature, each with its non-equivariant baseline behind ``equivariant=False``.

Inputs. Every model takes an image batch ``(B, in_channels, H, W)`` of any batch size
(``B = 0`` returns an empty ``(0, num_classes)``; ``B = 1`` gives, in eval mode, the
logits that sample gets in any larger batch). The batch must be a floating tensor of the
model's dtype (the dtype of its parameters): integer and bool images raise
[`DtypeError`][groupattn.DtypeError] — they are never cast silently, which would hide a
forgotten scaling such as ``x / 255`` — and so does a floating input of another dtype
(``float16`` or ``bfloat16`` images into a ``float32`` model, ``float64`` into
``float32``), where PyTorch itself would fail inside the first layer with a message that
names neither the model nor the fix. Cast the input (``x.float()``) or the model
(``model.to(torch.bfloat16)``), or run the model under ``torch.autocast``: while autocast
is active for the input's device, any floating input is accepted and autocast chooses
the precision of each operation.

Argument names follow one vocabulary across layers and models: ``dim`` (token width),
``num_heads``, ``head_dim``, ``patch_size``, ``window_size``, ``grid``; the names of
groupattn 0.1 (``heads``, ``patch``, ``window``, ``channels``, ``head_channels``) are
deprecated aliases for one release (also through [`create`][groupattn.models.create]).
"""

from ._escnn_hybrid import EscnnHybrid
from ._group_swin import GroupSwin
from ._group_vit import GroupViT
from ._gsa import GSANet
from ._p4_swin import P4Swin
from ._p4_vit import P4ViT
from ._registry import ModelSpec, create, get_spec, list_models, register_model
from ._swin import ShiftSwin
from ._twins import ShiftTwins
from ._vit import ShiftViT

__all__ = [
    "EscnnHybrid",
    "GSANet",
    "GroupSwin",
    "GroupViT",
    "ModelSpec",
    "P4Swin",
    "P4ViT",
    "ShiftSwin",
    "ShiftTwins",
    "ShiftViT",
    "create",
    "get_spec",
    "list_models",
    "register_model",
]
