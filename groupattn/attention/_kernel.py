"""The one attention kernel under every layer: PyTorch's scaled_dot_product_attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["attend"]


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None = None,
    dropout: float = 0.0,
    module: str = "attend",
) -> torch.Tensor:
    """Softmax attention ``softmax(q kᵀ / √d + bias) v`` via ``F.scaled_dot_product_attention``.

    Attention is equivariant to every permutation of the tokens applied jointly to
    queries, keys and values; only ``bias`` can break that, so a layer is equivariant to
    a group exactly when its bias is constant on the group's orbitals.

    Parameters
    ----------
    query
        ``(B, heads, N, d)``.
    key, value
        ``(B, heads, M, d)`` and ``(B, heads, M, d_v)``.
    bias
        Additive bias broadcastable to ``(B, heads, N, M)``, or ``None``.
    dropout
        Attention dropout probability (use 0 in evaluation).
    module
        Name used in error messages.

    Returns
    -------
    torch.Tensor
        ``(B, heads, N, d_v)``.
    """
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError(
            f"{module}: expected query, key, value of rank 4 (B, heads, N, d), got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if key.shape[-2] != value.shape[-2] or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"{module}: expected matching key/value lengths and query/key widths, got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if bias is not None:
        bias = bias.to(query.dtype)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=bias, dropout_p=dropout)
