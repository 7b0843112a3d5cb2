"""Pre-norm transformer blocks and the contract of a chain of modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..actions import FieldType, TrivialRepresentation
from ..contracts import Contract, Status, contract_of
from ..contracts._module import check_floating_input
from ..groups import Group
from ._mlp import MLP

__all__ = ["TransformerBlock", "chain_contract"]

_POINTWISE = (nn.LayerNorm, nn.Linear, nn.GELU, nn.ReLU, nn.Identity, nn.Dropout)


def _flatten(parts: Sequence[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    out: list[tuple[str, nn.Module]] = []
    for name, module in parts:
        if isinstance(module, nn.Sequential):
            out += _flatten([(f"{name}.{child}", m) for child, m in module.named_children()])
        else:
            out.append((name, module))
    return out


def chain_contract(
    parts: Sequence[tuple[str, nn.Module]], group: Group, input_type: FieldType | None = None
) -> Contract:
    """The contract of ``parts`` applied one after the other (``nn.Sequential`` are unrolled).

    Walks the parts in order, passing each the group acting on its input (a part's
    ``output_group`` becomes the next part's group). Returns *breaks* naming the first
    offending part (``"name: reason"``), *invariant* as soon as a part is invariant or a
    canonicalizing part leaves only the trivial group, *canonicalizing* if a canonicalizing
    part is not followed by an invariant one, and
    *equivariant* otherwise. Token-wise torch modules (``LayerNorm``, ``Linear``,
    activations, ``Identity``, ``Dropout``) count as equivariant.

    Parameters
    ----------
    parts
        ``(name, module)`` in forward order.
    group
        The group acting on the input of the first part.
    input_type
        The chain's input type (the first part's declared type by default).
    """
    current, kind = group, Status.EQUIVARIANT
    first_type, out_type = input_type, input_type
    for name, module in _flatten(parts):
        if kind == Status.CANONICALIZING and _has_one_element(current):
            # a canonicalizer left only the identity (e.g. a CentreAnchor under all the
            # torus's translations): whatever follows, the output no longer moves
            return Contract.invariant(first_type)
        if isinstance(module, _POINTWISE) and not hasattr(module, "contract"):
            continue
        if not hasattr(module, "contract"):
            return Contract.unknown(
                f"{name}: {type(module).__name__} declares no contract", first_type
            )
        contract = contract_of(module, current)
        if first_type is None:
            first_type = contract.input_type  # type: ignore[assignment]
        if contract.kind == Status.BROKEN:
            return Contract.breaks(f"{name}: {contract.reason}", first_type, contract.output_type)
        if contract.kind in (Status.UNVERIFIED, Status.FRAME_RESTORING):
            return Contract.unknown(f"{name}: {contract.reason or contract.kind.value}", first_type)
        if contract.kind == Status.INVARIANT:
            return Contract.invariant(first_type, contract.output_type)
        if contract.kind == Status.CANONICALIZING:
            kind = Status.CANONICALIZING
        out_type = contract.output_type or out_type
        current = contract.output_group or current
    output_group = None if current == group else current
    return Contract(kind, first_type, out_type, None, output_group)


def _has_one_element(group: Group) -> bool:
    """Whether ``group`` is the trivial group (``order() == 1``; ``False`` if it cannot say)."""
    order = getattr(group, "order", None)
    try:
        return callable(order) and order() == 1
    except Exception:  # an infinite group, or one that cannot count its elements
        return False


def _trivial_channels(field: FieldType | None) -> bool:
    channels = getattr(field, "channels", None)
    return channels is None or isinstance(channels, TrivialRepresentation)


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``.

    Works for any token layout ``(B, N, dim)``: a token grid
    ([`TokenField`][groupattn.actions.TokenField]), a set, or the tokens of any G-set
    ([`GSetField`][groupattn.actions.GSetField], e.g. around
    [`OrbitalAttention`][groupattn.attention.OrbitalAttention]). The attention layer restores its
    own frame (anchored window attention un-anchors before returning), so both
    residual additions combine tensors in the same frame. If the attention layer has
    ``pre_norm=True`` it normalises its own input and the block's first norm is the
    identity.

    Contract: the attention layer's, through the residual connections — its input
    type is the block's input and output type (for token layouts the output type
    equals the input type). *Breaks* if the attention layer breaks (with its reason),
    or if the tokens' channels carry a non-trivial representation (the norms and the
    MLP mix channels); *unknown* if the attention layer changes the layout (a residual
    would add different types) or promises nothing. Norms and the MLP act token by
    token, so they commute with every permutation of the tokens.

    Shapes: ``(B, N, dim) → (B, N, dim)``.

    Parameters
    ----------
    dim
        Token width.
    attention
        The token-mixing layer, ``(B, N, dim) → (B, N, dim)``, declaring a contract.
    mlp_ratio
        Hidden width of the MLP relative to ``dim``.
    """

    def __init__(self, dim: int, attention: nn.Module, mlp_ratio: float = 2.0) -> None:
        super().__init__()
        grid = getattr(attention, "grid", (1, 1))
        prefix = getattr(attention, "prefix", 0)
        # Attention layers with their own pre-norm (anchored layers normalise after anchoring).
        self.norm1: nn.Module = (
            nn.Identity() if getattr(attention, "pre_norm", False) else nn.LayerNorm(dim)
        )
        self.attention = attention
        self.norm2 = nn.LayerNorm(dim)
        # grid/prefix only describe the MLP's stand-alone contract; the block's contract
        # takes the token layout from the attention layer
        self.mlp = MLP(dim, int(dim * mlp_ratio), grid=grid, prefix=prefix)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Two residual sub-blocks."""
        check_floating_input(x, "TransformerBlock")
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def contract(self, group: Group, input_type: Any = None) -> Contract:
        """The attention layer's contract, through the residual connections (see the class docstring)."""
        attention = chain_contract([("attention", self.attention)], group, input_type)
        if attention.kind in (Status.BROKEN, Status.UNVERIFIED):
            return attention
        in_type, out_type = attention.input_type, attention.output_type
        if attention.kind == Status.INVARIANT or (in_type is not None and out_type != in_type):
            return Contract.unknown(
                f"attention: its output type {_describe(out_type)} differs from its input type "
                f"{_describe(in_type)}, so the residual connection adds different types",
                in_type,
            )
        if not _trivial_channels(out_type):
            return Contract.breaks(
                f"norm/mlp: LayerNorm and the MLP mix channels that carry {getattr(out_type, 'channels', None)!r}",
                in_type,
                out_type,
            )
        current = attention.output_group or group
        mlp = (
            self.mlp.contract(current, out_type)
            if out_type is not None
            else contract_of(self.mlp, current)
        )
        return Contract(attention.kind, in_type, mlp.output_type, None, attention.output_group)


def _describe(t: Any) -> str:
    return t.describe() if isinstance(t, FieldType) else repr(t)
