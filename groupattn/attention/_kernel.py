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


#: largest spread (max − min over a window) of the positional bias for which the
#: factorised kernel's normaliser cannot underflow, per dtype (``exp(−spread)`` must stay
#: a normal number); beyond it ``attend_shared_query_windows`` reports ``None``.
_MAX_BIAS_SPREAD = {
    torch.float16: 9.0,
    torch.bfloat16: 80.0,
    torch.float32: 80.0,
    torch.float64: 700.0,
}


def attend_shared_query_windows(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    neighbourhood: int,
    circular: bool = True,
    module: str = "attend_shared_query_windows",
) -> torch.Tensor | None:
    """Local ``k × k`` attention with one query per pixel and one bias per output slice.

    Computes, for every pixel ``i``, output slice ``g`` and head ``e``,

    ``out[g, i] = Σ_δ softmax_δ(q_i · k_{i+δ} / √d + bias[e, g, δ]) v_{i+δ}``,

    the attention of a lifting layer whose positional term depends only on the output
    slice and the window offset (additive bias, no content × position term). It is
    the same function as [`attend`][groupattn.attention.attend] on the ``k²`` window of each pixel (the tests
    compare them) but *factorised*: ``exp(c + b) = exp(c) · exp(b)``, so the content
    weights ``exp(q·k − max)`` are computed once per pixel — not once per output slice —
    and the sum over the window for all slices is one matrix product with the small
    ``(|H|, k²)`` table ``exp(bias − max)`` per head. This avoids the many tiny problems
    (``k² = 25`` keys, ``d = 3``) on which the fused kernel is dominated by overhead.

    Parameters
    ----------
    query, key, value
        ``(B, heads, d, H, W)`` (channels first).
    bias
        ``(heads, G, k²)``, window offsets row-major from ``(−r, −r)`` to ``(r, r)``.
    neighbourhood
        Odd window side ``k``.
    circular
        Windows wrap around the torus; otherwise positions outside the grid are zero
        tokens (key and value 0, so their logit is the bias alone), as in the tiled path.
    module
        Name used in error messages.

    Returns
    -------
    torch.Tensor or None
        ``(B, heads, G, d, H, W)`` (without gradients, a view of a contiguous
        ``(heads, d, G, B, H, W)`` tensor); ``None`` when the bias spreads by more than the
        dtype's safe range within a window (then the normaliser could underflow and the
        caller should use [`attend`][groupattn.attention.attend]). The check reads the bias's values, so it is
        skipped while ``torch.compile`` traces.

    Raises
    ------
    ValueError
        For inconsistent shapes or an even, non-positive or oversized neighbourhood.

    Notes
    -----
    With gradients the window sums are one matrix product over the stacked offsets
    (fast backward). Without, the content logits and the weighted values ``w_t · v_t``
    are written offset by offset into preallocated buffers (no per-offset temporaries)
    and summed by one batched matrix product per head and channel.
    """
    b, heads, d, height, width = query.shape
    k = neighbourhood
    if (
        key.shape != query.shape
        or value.shape[:2] != query.shape[:2]
        or value.shape[-2:] != query.shape[-2:]
    ):
        raise ValueError(
            f"{module}: expected query, key (B, heads, d, H, W) of equal shape and value (B, heads, d_v, H, W), got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if k < 1 or k % 2 == 0 or k > min(height, width):
        raise ValueError(
            f"{module}: expected an odd neighbourhood 1 <= k <= the grid side {min(height, width)}, got {k}"
        )
    if bias.dim() != 3 or bias.shape[0] != heads or bias.shape[2] != k * k:
        raise ValueError(
            f"{module}: expected bias (heads={heads}, G, k²={k * k}), got {tuple(bias.shape)}"
        )
    bias = bias.to(query.dtype)
    spread = bias.amax(-1) - bias.amin(-1)
    if not torch.compiler.is_compiling() and bool(
        (spread > _MAX_BIAS_SPREAD.get(query.dtype, 80.0)).any()
    ):
        return None
    r = k // 2
    d_v = value.shape[2]
    g = bias.shape[1]

    mode = "circular" if circular else "constant"

    def padded(x: torch.Tensor) -> torch.Tensor:
        """``(B, heads, c, H, W)`` → ``(heads, c, B, H + 2r, W + 2r)``, wrapped or zero-padded."""
        flat = x.permute(1, 2, 0, 3, 4).reshape(heads, -1, height, width)
        return F.pad(flat, (r, r, r, r), mode=mode).view(
            heads, x.shape[2], b, height + 2 * r, width + 2 * r
        )

    offsets = [(dy, dx) for dy in range(k) for dx in range(k)]  # row-major, as the bias
    grad = torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value, bias))
    q = query.permute(1, 2, 0, 3, 4) * (d**-0.5)  # (heads, d, B, H, W)
    keys = padded(key)
    content = None if grad else q.new_empty(heads, k * k, b, height, width)
    logits = []
    for t, (dy, dx) in enumerate(
        offsets
    ):  # content logits per offset; d is small: products, not a reduction
        shifted = keys[..., dy : dy + height, dx : dx + width]
        if content is None:
            term = shifted[:, 0] * q[:, 0]
            for c in range(1, d):
                term = term + shifted[:, c] * q[:, c]
            logits.append(term)
        else:  # inference: write in place, no per-offset temporaries
            term = (
                content[:, t].copy_(shifted[:, 0]).mul_(q[:, 0])
            )  # (no out=: torch.compile rejects strided out)
            for c in range(1, d):
                term.addcmul_(shifted[:, c], q[:, c])
    if content is None:
        content = torch.stack(logits, dim=1)  # (heads, k², B, H, W)
        weights = torch.exp(content - content.amax(1, keepdim=True))  # 1 at each window's maximum
    else:
        weights = content.sub_(content.amax(1, keepdim=True)).exp_()
    table = torch.exp(bias - bias.amax(-1, keepdim=True))  # (heads, G, k²)
    values = padded(value)

    def weighted(t: int) -> torch.Tensor:  # w_t · v_{i+δ_t}: (heads, d_v, B, H, W)
        dy, dx = offsets[t]
        return values[..., dy : dy + height, dx : dx + width] * weights[:, None, t]

    denominator = torch.matmul(table, weights.reshape(heads, k * k, -1)).view(
        heads, 1, g, b, height, width
    )
    if grad:
        # training: one matrix product over the stacked offsets (a fast backward)
        stacked = torch.stack([weighted(t) for t in range(k * k)], dim=1).reshape(heads, k * k, -1)
        numerator = (
            torch.matmul(table, stacked).view(heads, g, d_v, b, height, width).transpose(1, 2)
        )
        return (numerator / denominator).permute(3, 0, 2, 1, 4, 5)
    # inference: write w_t · v_t offset by offset into one (heads, d_v, k², B, H, W) buffer (no
    # temporaries), then one batched matrix product per (head, channel) with the (G, k²) table
    stacked = query.new_empty(heads, d_v, k * k, b, height, width)
    for t, (dy, dx) in enumerate(offsets):
        slot = stacked[:, :, t]
        slot.copy_(values[..., dy : dy + height, dx : dx + width]).mul_(weights[:, None, t])
    numerator = torch.matmul(
        table[:, None], stacked.view(heads, d_v, k * k, -1)
    )  # (heads, d_v, G, B·H·W)
    # a view of (heads, d_v, G, B, H, W) storage: the caller's channel projection needs no copy
    return (
        numerator.view(heads, d_v, g, b, height, width).div_(denominator).permute(3, 0, 2, 1, 4, 5)
    )
