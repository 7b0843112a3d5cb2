"""The one attention entry point under every layer, and the implementations it chooses from.

[`attend`][groupattn.attention.attend] computes ``softmax(q kᵀ / √d + bias) v``. Which
implementation runs is decided in one place,
[`choose_implementation`][groupattn.attention.choose_implementation]:

* ``"sdpa"`` — PyTorch's ``F.scaled_dot_product_attention``, forward and backward;
* ``"chunked"`` — the fused SDPA forward with a detached bias, and a memory-bounded
  backward that recomputes the probabilities in chunks and also returns the bias's
  gradient (SDPA's fused CPU kernel has none: with a bias that requires a gradient it
  falls back to its unfused math path, which materialises every logit several times;
  the chunked backward bounds the memory by the chunk);
* ``"factorised"`` — [`attend_shared_query_windows`][groupattn.attention.attend_shared_query_windows],
  for local attention whose query is shared by all output slices and whose bias
  depends only on the slice and the window offset (local lifting attention).

[`attention_implementation`][groupattn.attention.attention_implementation] forces one of
them (for tests and benchmarks).
"""

from __future__ import annotations

import math
import weakref
from types import TracebackType
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor

from .._errors import ConfigurationError

__all__ = [
    "attend",
    "attend_shared_query_windows",
    "attention_implementation",
    "choose_implementation",
    "get_attention_implementation",
]

# what the switch accepts; "auto" lets choose_implementation decide per call
IMPLEMENTATIONS: tuple[str, ...] = ("auto", "sdpa", "chunked", "factorised")
Implementation = Literal["sdpa", "chunked", "factorised"]

_DEFAULT_CHUNK_ELEMENTS = 1 << 24  # logits per chunk of the chunked backward (64 MiB in float32)

# Process-wide state of the switch: plain Python values, read (not written) in forward, so
# torch.compile guards on them and recompiles when they change; no tensors, no buffers.
# ``_forced`` / ``_chunk_elements`` are what forward reads: the innermost active ``with``
# block's setting, else the setting of the last plain call (``_base``).
_forced: str = "auto"
_chunk_elements: int = _DEFAULT_CHUNK_ELEMENTS
_base: tuple[str, int] = ("auto", _DEFAULT_CHUNK_ELEMENTS)
_active: list[tuple[object, tuple[str, int]]] = []  # entered blocks, innermost last
# plain calls made outside blocks, oldest first: (manager, setting); the plain setting is
# the last one's. Entering a manager turns its call into a block: its entry leaves this
# list, and the call before it is the plain setting again. Managers are held weakly (a
# setter call's manager is dropped at once); an entry whose manager is gone can never
# leave, so everything before it is pruned.
_plain_calls: list[tuple[weakref.ref[Any], tuple[str, int]]] = []
_last_block_call: object | None = None  # a plain call made inside a block, until entered


def _apply() -> None:
    global _forced, _chunk_elements, _base
    _base = _plain_calls[-1][1] if _plain_calls else ("auto", _DEFAULT_CHUNK_ELEMENTS)
    _forced, _chunk_elements = _active[-1][1] if _active else _base


class _RestoreImplementation:
    """What [`attention_implementation`][groupattn.attention.attention_implementation] returns:
    the switch is already set; a ``with`` block holds the setting until it is left.

    Blocks are tracked as a set of active entries, not a stack of saved values: leaving
    blocks in any order (generators, hand-called ``__exit__``) leaves the setting of the
    innermost block still active, or the plain setting when none is; the same object can
    be entered again (each entry applies its setting anew).
    """

    def __init__(
        self, current: tuple[str, int], undo: tuple[object | None, tuple[str, int]]
    ) -> None:
        self._current = current
        self._undo = undo  # (block token or None for the plain setting, the value it replaced)
        self._entries: list[object] = []

    def __enter__(self) -> str:
        global _last_block_call
        where, replaced = self._undo
        if where is None:  # the call set the plain setting; a block holds it instead
            _plain_calls[:] = [entry for entry in _plain_calls if entry[0]() is not self]
        elif _last_block_call is self:  # the call changed a block's setting: put it back
            _active[:] = [
                (token, replaced if token is where else value) for token, value in _active
            ]
            _last_block_call = None
        token = object()
        self._entries.append(token)
        _active.append((token, self._current))
        _apply()
        return self._current[0]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._entries:
            token = self._entries.pop()
            _active[:] = [entry for entry in _active if entry[0] is not token]
        _apply()

    def __repr__(self) -> str:
        return f"attention_implementation({self._current[0]!r}, chunk_elements={self._current[1]})"


def attention_implementation(
    name: str = "auto", *, chunk_elements: int | None = None
) -> _RestoreImplementation:
    """Force one attention implementation, as a context manager or a plain setter.

    ``with attention_implementation("sdpa"): ...`` runs every attention call in the
    block on that implementation and restores the previous setting on leaving the block
    (also when it raises, when blocks are left out of order, and each time the same
    object is entered again); ``attention_implementation("chunked")`` alone sets it until
    the next call (``attention_implementation("auto")`` restores the default); inside a
    block, a plain call changes that block's setting until the block is left. The
    setting is process-wide (not per thread) and is read by every layer in ``forward``
    as a plain Python value, so ``torch.compile`` guards on it: changing it recompiles
    rather than running a stale choice.

    A forced implementation is never silently replaced: a layer whose problem it cannot
    compute raises [`ConfigurationError`][groupattn.ConfigurationError] naming the layer
    (``"factorised"`` on anything but a local lifting layer with an additive bias only,
    or on a bias that spreads beyond the factorised kernel's safe range; ``"chunked"``
    with attention dropout).

    Parameters
    ----------
    name
        ``"auto"`` (the default: [`choose_implementation`][groupattn.attention.choose_implementation]
        decides per call), ``"sdpa"``, ``"chunked"`` or ``"factorised"``.
    chunk_elements
        Logits per chunk of the chunked backward (default ``2**24``, 64 MiB in float32);
        ``None`` keeps the current value. Small values (tests) exercise many chunks.

    Returns
    -------
    context manager
        Entering it gives the name; leaving it restores the previous name and chunk size.

    Raises
    ------
    ConfigurationError
        For an unknown name or a non-positive ``chunk_elements``.

    Examples
    --------
    >>> import torch
    >>> from groupattn.attention import attend, attention_implementation, get_attention_implementation
    >>> q = torch.randn(1, 2, 5, 4)
    >>> with attention_implementation("chunked"):
    ...     out = attend(q, q, q)
    >>> get_attention_implementation()
    'auto'
    """
    if name not in IMPLEMENTATIONS:
        raise ConfigurationError(
            f"attention_implementation: expected one of {', '.join(map(repr, IMPLEMENTATIONS))}, got {name!r}"
        )
    if chunk_elements is not None and (
        isinstance(chunk_elements, bool)
        or not isinstance(chunk_elements, int)
        or chunk_elements < 1
    ):
        raise ConfigurationError(
            f"attention_implementation: expected a positive integer chunk_elements or None, got {chunk_elements!r}"
        )
    global _last_block_call
    setting = (name, _chunk_elements if chunk_elements is None else chunk_elements)
    if _active:  # a plain call inside a block changes that block's setting, until it is left
        token, replaced = _active[-1]
        _active[-1] = (token, setting)
        manager = _RestoreImplementation(setting, (token, replaced))
        _last_block_call = manager
    else:
        manager = _RestoreImplementation(setting, (None, _base))
        dead = [i for i, (ref, _) in enumerate(_plain_calls) if ref() is None]
        if dead:
            del _plain_calls[: dead[-1]]
        _plain_calls.append((weakref.ref(manager), setting))
    _apply()
    return manager


def get_attention_implementation() -> str:
    """The name set by [`attention_implementation`][groupattn.attention.attention_implementation]
    (``"auto"`` unless forced)."""
    return _forced


#: largest spread (max − min over a window) of the positional bias for which the
#: factorised kernel's normaliser cannot underflow, per dtype (``exp(−spread)`` must stay
#: a normal number); beyond it ``attend_shared_query_windows`` reports ``None``.
_MAX_BIAS_SPREAD = {
    torch.float16: 9.0,
    torch.bfloat16: 80.0,
    torch.float32: 80.0,
    torch.float64: 700.0,
}


def _values_readable(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values costs no host synchronisation: a real CPU tensor,
    outside compilation (not an accelerator's, not a fake or meta tensor)."""
    return (
        t.device.type == "cpu"
        and not isinstance(t, FakeTensor)
        and not torch.compiler.is_compiling()
    )


def _spread_fits(window_bias: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the factorised normaliser cannot underflow. Not checked (``True``) where
    reading the values would synchronise with a device or cannot happen (compiling, fake
    tensors): only a forced ``"factorised"`` gets there, and it runs unchecked."""
    if not _values_readable(window_bias):
        return True
    spread = window_bias.amax(-1) - window_bias.amin(-1)
    return not bool((spread > _MAX_BIAS_SPREAD.get(dtype, 80.0)).any())


def choose_implementation(
    query: torch.Tensor,
    bias: torch.Tensor | None = None,
    dropout: float = 0.0,
    *,
    window_bias: torch.Tensor | None = None,
    module: str = "attend",
) -> Implementation:
    """The implementation an attention call runs on: the one place the choice is made.

    [`attend`][groupattn.attention.attend] consults it on every call; a layer whose
    problem also has the shared-query-windows form (local lifting attention with an
    additive bias only) consults it with ``window_bias`` before building the dense
    problem. Tests and benchmarks call it to ask what a call would use.

    With the switch at ``"auto"`` (see
    [`attention_implementation`][groupattn.attention.attention_implementation]):

    1. ``"factorised"`` when ``window_bias`` is given, lies on the CPU, and its spread
       within each window fits the dtype (80 in float32, 700 in float64, 9 in float16).
       The check reads the bias's values, which on an accelerator would be a host
       synchronisation and which cannot happen while ``torch.compile`` or
       ``torch.export`` traces (fake tensors): there ``"auto"`` computes the windows
       problem densely instead — no forward pass reads device values — and a forced
       ``"factorised"`` runs unchecked;
    2. else ``"chunked"`` when the bias (``window_bias`` for a windows problem) requires
       a gradient, gradients are enabled and ``dropout == 0``;
    3. else ``"sdpa"``.

    A forced name is returned as it is, or refused when the problem cannot use it.

    Parameters
    ----------
    query
        ``(B, heads, N, d)`` for a dense problem, ``(B, heads, d, H, W)`` for a windows
        problem (only its dtype is read).
    bias
        The additive bias of a dense problem (broadcastable to ``(B, heads, N, M)``), or ``None``.
    dropout
        Attention dropout probability.
    window_bias
        ``(heads, G, k²)``: the problem is one of
        [`attend_shared_query_windows`][groupattn.attention.attend_shared_query_windows]
        with this bias (the caller can also compute it densely); ``None`` for a dense problem.
    module
        Name used in error messages (the calling layer).

    Returns
    -------
    str
        ``"sdpa"``, ``"chunked"`` or ``"factorised"``. For a windows problem ``"sdpa"`` and
        ``"chunked"`` mean: compute it densely (the layer's tiled path), on that implementation.

    Raises
    ------
    ConfigurationError
        When ``"factorised"`` is forced on a dense problem or on a window bias that spreads
        beyond the dtype's safe range, or ``"chunked"`` is forced with ``dropout > 0``.
    """
    forced = _forced
    if window_bias is not None:
        if torch.compiler.is_compiling() and forced in ("auto", "factorised"):
            # the spread check reads the bias's values, which a compiled graph cannot branch
            # on: "auto" takes the exact dense path (the same values as eager up to
            # rounding); a forced "factorised" runs unchecked, as the user asked
            if forced == "factorised":
                return "factorised"
        elif forced == "auto" and not _values_readable(window_bias):
            pass  # checking the spread would read device values: the exact dense path
        elif forced in ("auto", "factorised"):
            if _spread_fits(window_bias, query.dtype):
                return "factorised"
            if forced == "factorised":
                spread = float((window_bias.amax(-1) - window_bias.amin(-1)).max().detach())
                raise ConfigurationError(
                    f"{module}: attention_implementation('factorised') expected a window bias whose spread "
                    f"(max − min within a window) is at most {_MAX_BIAS_SPREAD.get(query.dtype, 80.0)} in "
                    f"{query.dtype}, got {spread:.4g} (the factorised normaliser could underflow); use 'auto', "
                    "'sdpa' or 'chunked'"
                )
        bias = window_bias
    elif forced == "factorised":
        raise ConfigurationError(
            f"{module}: attention_implementation('factorised') expected a shared-query windows problem "
            "(local LiftingSelfAttention with an additive bias only: one query per pixel for all output "
            f"slices), got a dense attention problem (query of shape {tuple(query.shape)}); use 'auto', "
            "'sdpa' or 'chunked'"
        )
    if forced == "sdpa":
        return "sdpa"
    if forced == "chunked":
        if dropout > 0.0:
            raise ConfigurationError(
                f"{module}: attention_implementation('chunked') expected dropout 0 (the chunked backward "
                f"does not replay dropout), got {dropout}; use 'auto' or 'sdpa'"
            )
        return "chunked"
    trainable = bias is not None and bias.requires_grad and torch.is_grad_enabled()
    return "chunked" if trainable and dropout == 0.0 else "sdpa"


def _sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None,
    dropout: float = 0.0,
) -> torch.Tensor:
    return F.scaled_dot_product_attention(query, key, value, attn_mask=bias, dropout_p=dropout)


class _AttendTrainableBias(torch.autograd.Function):
    """SDPA forward, memory-bounded chunked backward (the ``"chunked"`` implementation).

    PyTorch's fused CPU kernel has no gradient for ``attn_mask``; asking for one falls
    back to the unfused path that materialises every ``(B, heads, Q, K)`` logit several
    times. Here the forward pass is the fused kernel (with a detached bias) and the
    backward pass recomputes the probabilities ``P`` over chunks of batch and queries
    (never more than the switch's ``chunk_elements`` logits at once) to accumulate
    ``dbias = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O))`` together with ``dq``, ``dk``, ``dv``.
    ``bias`` is 4-D, broadcastable to ``(B, heads, Q, K)``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        bias: torch.Tensor,
        chunk_elements: int,
    ) -> torch.Tensor:
        with torch.no_grad():  # a detached mask keeps the fused kernel
            out = _sdpa(query.detach(), key.detach(), value.detach(), bias.detach())
        ctx.save_for_backward(query, key, value, bias, out)
        ctx.chunk_elements = chunk_elements
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        query, key, value, bias, out = ctx.saved_tensors
        grads = _chunked_backward(
            query,
            key,
            value,
            bias,
            out,
            grad_out,
            ctx.chunk_elements,
            bias_grad=bool(ctx.needs_input_grad[3]),
        )
        return (*grads, None)


def _chunked_backward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    out: torch.Tensor,
    grad_out: torch.Tensor,
    chunk_elements: int = _DEFAULT_CHUNK_ELEMENTS,
    bias_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(dq, dk, dv, dbias)`` of softmax attention, in chunks of at most ``chunk_elements`` logits.

    ``query`` ``(B, heads, Q, d)``, ``key`` / ``value`` ``(B, heads, K, d)`` / ``(B, heads, K, d_v)``,
    ``bias`` 4-D and broadcastable to ``(B, heads, Q, K)`` (``dbias`` has its shape, summed
    over the broadcast axes; ``None`` unless ``bias_grad``), ``out`` and ``grad_out``
    ``(B, heads, Q, d_v)``.
    """
    b, heads, q_len, d = query.shape
    k_len = key.shape[-2]
    scale = 1.0 / math.sqrt(d)
    # the layers' head merge hands back a permuted gradient: one copy here, not one per matmul
    grad_out = grad_out.contiguous()
    grad_q = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    grad_k = torch.zeros(key.shape, dtype=key.dtype, device=key.device)
    grad_v = torch.zeros(value.shape, dtype=value.dtype, device=value.device)
    grad_bias = torch.zeros(bias.shape, dtype=bias.dtype, device=bias.device) if bias_grad else None
    rows = max(1, min(q_len, chunk_elements // max(1, heads * k_len)))
    batch_chunk = max(1, min(b, chunk_elements // max(1, heads * rows * k_len)))
    full = (b, heads, q_len, k_len)
    bias_full = bias.expand(full)
    reduce_dims = [i for i, n in enumerate(bias.shape) if n == 1 and full[i] != 1]
    for b0 in range(0, b, batch_chunk):
        b1 = min(b, b0 + batch_chunk)
        k_chunk, v_chunk = key[b0:b1], value[b0:b1]
        for r0 in range(0, q_len, rows):
            r1 = min(q_len, r0 + rows)
            q_chunk, do_chunk = query[b0:b1, :, r0:r1], grad_out[b0:b1, :, r0:r1]
            logits = torch.matmul(q_chunk, k_chunk.transpose(-1, -2)).mul_(scale)
            logits.add_(bias_full[b0:b1, :, r0:r1])
            # a row whose every key is masked (-inf) has no softmax: SDPA outputs zeros
            # there and passes no gradient through it; softmax alone would give NaN
            # probabilities, and NaN gradients for every key and value
            masked_rows = logits.amax(dim=-1, keepdim=True) == -math.inf
            probs = torch.softmax(logits, dim=-1).masked_fill_(masked_rows, 0.0)
            del logits, masked_rows
            grad_v[b0:b1] += torch.matmul(probs.transpose(-1, -2), do_chunk)
            row_dot = (do_chunk * out[b0:b1, :, r0:r1]).sum(-1, keepdim=True)
            d_logits = torch.matmul(do_chunk, v_chunk.transpose(-1, -2)).sub_(row_dot).mul_(probs)
            del probs
            grad_q[b0:b1, :, r0:r1] = torch.matmul(d_logits, k_chunk) * scale
            grad_k[b0:b1] += torch.matmul(d_logits.transpose(-1, -2), q_chunk) * scale
            if grad_bias is not None:
                if reduce_dims:
                    d_logits = d_logits.sum(dim=reduce_dims, keepdim=True)
                batch_slice = slice(None) if bias.shape[0] == 1 else slice(b0, b1)
                row_slice = slice(None) if bias.shape[2] == 1 else slice(r0, r1)
                grad_bias[batch_slice, :, row_slice] += d_logits
    return grad_q, grad_k, grad_v, grad_bias


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None = None,
    dropout: float = 0.0,
    module: str = "attend",
) -> torch.Tensor:
    """Softmax attention ``softmax(q kᵀ / √d + bias) v``: the one entry point under every layer.

    Attention is equivariant to every permutation of the tokens applied jointly to
    queries, keys and values; only ``bias`` can break that, so a layer is equivariant to
    a group exactly when its bias is constant on the group's orbitals.

    The implementation is chosen by
    [`choose_implementation`][groupattn.attention.choose_implementation] (or forced with
    [`attention_implementation`][groupattn.attention.attention_implementation]):
    ``F.scaled_dot_product_attention`` (``"sdpa"``), or — when the bias requires a
    gradient — its fused forward with a memory-bounded chunked backward that also returns
    the bias's gradient (``"chunked"``; SDPA itself falls back to its unfused math path
    for a grad-requiring mask). Both compute the same function; the tests compare values
    and gradients.

    Parameters
    ----------
    query
        ``(B, heads, N, d)``.
    key, value
        ``(B, heads, M, d)`` and ``(B, heads, M, d_v)``.
    bias
        Additive bias broadcastable to ``(B, heads, N, M)``, or ``None``; cast to the
        query's dtype.
    dropout
        Attention dropout probability (use 0 in evaluation).
    module
        Name used in error messages.

    Returns
    -------
    torch.Tensor
        ``(B, heads, N, d_v)``.

    Raises
    ------
    ValueError
        For inputs that are not rank 4 or whose lengths or widths do not match.
    ConfigurationError
        When the forced implementation cannot compute this call (see
        [`attention_implementation`][groupattn.attention.attention_implementation]).
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
    if choose_implementation(query, bias, dropout, module=module) == "chunked":
        if bias is None:
            bias = query.new_zeros(1, 1, 1, 1)
        elif bias.dim() < 4:
            bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
        return _AttendTrainableBias.apply(  # type: ignore[no-any-return]
            query, key, value, bias, _chunk_elements
        )
    return _sdpa(query, key, value, bias, dropout)


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

    It is the ``"factorised"`` implementation of the attention entry point: layers call it
    only when [`choose_implementation`][groupattn.attention.choose_implementation] (given
    the window bias) returns ``"factorised"``. Calling it directly bypasses
    [`attention_implementation`][groupattn.attention.attention_implementation].

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
    if not _spread_fits(bias, query.dtype):
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
