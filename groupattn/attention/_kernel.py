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

#: Logits per chunk of the chunked backward: 4 MiB in float32, so that a chunk's logits,
#: probabilities and their gradient stay in a CPU's last-level cache between the five
#: products that use them (2**24 streamed through memory: training steps of the GSA layers
#: at 9 × 20 took 1.2–2.2× as long).
_DEFAULT_CHUNK_ELEMENTS = 1 << 20

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
        Logits per chunk of the chunked backward (default ``2**20``, 4 MiB in float32);
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


def _refuse_double_backward(module: str, implementation: str) -> None:
    """Raise when a custom backward is asked to build a graph (``create_graph=True``).

    The chunked and factorised backward passes are written out by hand and are not
    themselves differentiable; PyTorch's ``once_differentiable`` would let a second-order
    gradient taken with ``torch.autograd.grad(..., inputs=...)`` silently drop their terms.
    """
    if torch.is_grad_enabled():
        raise ConfigurationError(
            f"{module}: the {implementation!r} attention implementation has no second-order "
            "gradient (a backward pass with create_graph=True, e.g. a gradient penalty); run "
            "the layer under attention_implementation('sdpa') for higher-order gradients"
        )


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
        module: str,
    ) -> torch.Tensor:
        with torch.no_grad():  # a detached mask keeps the fused kernel
            out = _sdpa(query.detach(), key.detach(), value.detach(), bias.detach())
        ctx.save_for_backward(query, key, value, bias, out)
        ctx.chunk_elements = chunk_elements
        ctx.module = module
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        _refuse_double_backward(ctx.module, "chunked")
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
        return (*grads, None, None)


def _chunked_backward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor,
    out: torch.Tensor,
    grad_out: torch.Tensor,
    chunk_elements: int = _DEFAULT_CHUNK_ELEMENTS,
    bias_grad: bool = True,
    masked_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(dq, dk, dv, dbias)`` of softmax attention, in chunks of at most ``chunk_elements`` logits.

    ``query`` ``(B, heads, Q, d)``, ``key`` / ``value`` ``(B, heads, K, d)`` / ``(B, heads, K, d_v)``,
    ``bias`` 4-D and broadcastable to ``(B, heads, Q, K)`` (``dbias`` has its shape, summed
    over the broadcast axes; ``None`` unless ``bias_grad``), ``out`` and ``grad_out``
    ``(B, heads, Q, d_v)``. ``masked_rows``: ``bias.amax(-1, keepdim=True) == -inf``, when
    the caller already has it (it is found from the bias otherwise).
    """
    b, heads, q_len, d = query.shape
    k_len = key.shape[-2]
    scale = 1.0 / math.sqrt(d)
    dtypes = (query.dtype, key.dtype, value.dtype, bias.dtype)
    work = _compute_dtype(query.dtype)
    if query.dtype != work:  # half precisions: logits, softmax and products in float32
        query, key, value, out, grad_out, bias = (
            t.to(work) for t in (query, key, value, out, grad_out, bias)
        )
    # the layers' head merge hands back a permuted gradient: one copy here, not one per matmul
    grad_out = grad_out.contiguous()
    grad_q = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    # written by each batch chunk's first row chunk, accumulated by the others: no zero fill
    grad_k = torch.empty(key.shape, dtype=key.dtype, device=key.device)
    grad_v = torch.empty(value.shape, dtype=value.dtype, device=value.device)
    # the bias gradient sums over every chunk (and the broadcast axes): in float32 for half
    # precisions, rounded to the bias's dtype once at the end
    grad_bias = (
        torch.zeros(bias.shape, dtype=_compute_dtype(bias.dtype), device=bias.device)
        if bias_grad
        else None
    )
    rows = max(1, min(q_len, chunk_elements // max(1, heads * k_len)))
    batch_chunk = max(1, min(b, chunk_elements // max(1, heads * rows * k_len)))
    full = (b, heads, q_len, k_len)
    bias_full = bias.expand(full)
    reduce_dims = [i for i, n in enumerate(bias.shape) if n == 1 and full[i] != 1]
    # a row whose every key is masked (-inf in the bias; q·k is finite) has no softmax: SDPA
    # outputs zeros there and passes no gradient through it; softmax alone would give NaN
    # probabilities, and NaN gradients for every key and value. Found once, from the bias.
    if masked_rows is None:
        masked_rows = bias.amax(dim=-1, keepdim=True) == -math.inf
    masked = masked_rows.expand(b, heads, q_len, 1)
    # local attention masks keys, rarely whole rows: skip the fill when no row is masked
    # (read on the CPU only: on an accelerator it would be a host synchronisation)
    fill = not _values_readable(masked_rows) or bool(masked_rows.any())
    for b0 in range(0, b, batch_chunk):
        b1 = min(b, b0 + batch_chunk)
        k_chunk, v_chunk = key[b0:b1], value[b0:b1]
        for r0 in range(0, q_len, rows):
            r1 = min(q_len, r0 + rows)
            q_chunk, do_chunk = query[b0:b1, :, r0:r1], grad_out[b0:b1, :, r0:r1]
            logits = torch.matmul(q_chunk, k_chunk.transpose(-1, -2)).mul_(scale)
            logits.add_(bias_full[b0:b1, :, r0:r1])
            probs = torch.softmax(logits, dim=-1)
            if fill:
                probs.masked_fill_(masked[b0:b1, :, r0:r1], 0.0)
            del logits
            first = r0 == 0
            if first:
                torch.matmul(probs.transpose(-1, -2), do_chunk, out=grad_v[b0:b1])
            else:
                grad_v[b0:b1] += torch.matmul(probs.transpose(-1, -2), do_chunk)
            row_dot = (do_chunk * out[b0:b1, :, r0:r1]).sum(-1, keepdim=True)
            d_logits = torch.matmul(do_chunk, v_chunk.transpose(-1, -2)).sub_(row_dot).mul_(probs)
            del probs
            grad_q[b0:b1, :, r0:r1] = torch.matmul(d_logits, k_chunk) * scale
            if first:
                torch.matmul(d_logits.transpose(-1, -2), q_chunk, out=grad_k[b0:b1])
                grad_k[b0:b1] *= scale
            else:
                grad_k[b0:b1] += torch.matmul(d_logits.transpose(-1, -2), q_chunk) * scale
            if grad_bias is not None:
                if reduce_dims:
                    d_logits = d_logits.sum(dim=reduce_dims, keepdim=True)
                batch_slice = slice(None) if bias.shape[0] == 1 else slice(b0, b1)
                row_slice = slice(None) if bias.shape[2] == 1 else slice(r0, r1)
                grad_bias[batch_slice, :, row_slice] += d_logits
    return (
        grad_q.to(dtypes[0]),
        grad_k.to(dtypes[1]),
        grad_v.to(dtypes[2]),
        None if grad_bias is None else grad_bias.to(dtypes[3]),
    )


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
            query, key, value, bias, _chunk_elements, module
        )
    return _sdpa(query, key, value, bias, dropout)


def _halo_rows(tokens: torch.Tensor, halo: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """The rows of ``tokens`` ``(B, heads, N, G, d)``, flattened to ``(B·heads·N, G·d)``, that
    make up the halos of tiles ``start … stop − 1`` of ``B·T``: long
    ``((stop − start)·heads·S,)``, by tile, then head, then halo position (tile
    ``j = b·T + t`` reads the tokens ``halo[t]`` of sample ``b``)."""
    heads, n = tokens.shape[1], tokens.shape[2]
    t = halo.shape[0]
    tiles = torch.arange(start, stop, device=tokens.device)
    sample = torch.div(tiles, t, rounding_mode="floor")
    head = torch.arange(heads, device=tokens.device)
    first = (sample[:, None] * heads + head[None, :]) * n  # (tiles, heads)
    return (first[:, :, None] + halo[tiles - sample * t][:, None, :]).reshape(-1)


def _gather_halos(
    tokens: torch.Tensor, rows: torch.Tensor, tiles: int, halo_size: int
) -> torch.Tensor:
    """Keys (or values) of ``tiles`` tiles with halos of ``halo_size`` tokens, gathered from
    their tokens by ``rows`` (``_halo_rows``).

    ``tokens`` ``(B, heads, N, G, d)`` contiguous — head-major, so that one row copy per
    (tile, head, halo position) gives the attention layout directly. Returns
    ``(tiles, heads, S·G, d)``.
    """
    b, heads, n, g, d = tokens.shape
    picked = tokens.reshape(b * heads * n, g * d).index_select(0, rows)
    return picked.view(tiles, heads, halo_size * g, d)


def _scatter_halos(grad_tokens: torch.Tensor, grad: torch.Tensor, rows: torch.Tensor) -> None:
    """Add the gradient ``(tiles, heads, S·G, d)`` of gathered halos into ``grad_tokens``
    ``(B, heads, N, G, d)``: the adjoint of ``_gather_halos`` with the same ``rows``."""
    b, heads, n, g, d = grad_tokens.shape
    grad_tokens.view(b * heads * n, g * d).index_add_(0, rows, grad.reshape(-1, g * d))


class _AttendHalos(torch.autograd.Function):
    """``attend`` over keys and values gathered into halos, saving the tokens, not the halos.

    The ``"chunked"`` implementation for local attention by tiles: the forward pass gathers
    every tile's halo and runs the fused kernel; the backward pass gathers the halos again,
    a chunk of tiles at a time, runs the chunked backward on them and adds the halos'
    gradients straight back into the tokens' — so neither the halos (each token copied
    into every halo that holds it) nor their gradients outlive one chunk.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        query: torch.Tensor,
        key_tokens: torch.Tensor,
        value_tokens: torch.Tensor,
        halo: torch.Tensor,
        bias: torch.Tensor,
        chunk_elements: int,
        module: str,
    ) -> torch.Tensor:
        tiles = query.shape[0]
        rows = _halo_rows(key_tokens, halo, 0, tiles)
        with torch.no_grad():
            key = _gather_halos(key_tokens, rows, tiles, halo.shape[1])
            value = _gather_halos(value_tokens, rows, tiles, halo.shape[1])
            out = _sdpa(query.detach(), key, value, bias.detach())
        del key, value
        ctx.save_for_backward(query, key_tokens, value_tokens, halo, bias, out)
        ctx.chunk_elements = chunk_elements
        ctx.module = module
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        _refuse_double_backward(ctx.module, "chunked")
        query, key_tokens, value_tokens, halo, bias, out = ctx.saved_tensors
        tiles, heads, q_len, _ = query.shape
        k_len = halo.shape[1] * key_tokens.shape[3]
        grad_out = grad_out.contiguous()
        grad_query = torch.empty_like(query)
        grad_key = torch.zeros_like(key_tokens)
        grad_value = torch.zeros_like(value_tokens)
        bias_grad = bool(ctx.needs_input_grad[4])
        # summed over the chunks in float32 for half precisions (see _chunked_backward)
        grad_bias = (
            torch.zeros(bias.shape, dtype=_compute_dtype(bias.dtype), device=bias.device)
            if bias_grad
            else None
        )
        masked_rows = bias.amax(dim=-1, keepdim=True) == -math.inf
        per_bias = bias.shape[0] != 1
        step = max(1, ctx.chunk_elements // max(1, heads * q_len * k_len))
        for start in range(0, tiles, step):
            stop = min(tiles, start + step)
            part = slice(start, stop) if per_bias else slice(None)
            rows = _halo_rows(key_tokens, halo, start, stop)  # the same for keys and values
            d_q, d_k, d_v, d_bias = _chunked_backward(
                query[start:stop],
                _gather_halos(key_tokens, rows, stop - start, halo.shape[1]),
                _gather_halos(value_tokens, rows, stop - start, halo.shape[1]),
                bias[part],
                out[start:stop],
                grad_out[start:stop],
                ctx.chunk_elements,
                bias_grad=bias_grad,
                masked_rows=masked_rows[part],
            )
            grad_query[start:stop] = d_q
            _scatter_halos(grad_key, d_k, rows)
            _scatter_halos(grad_value, d_v, rows)
            if grad_bias is not None and d_bias is not None:
                grad_bias[part] += d_bias
        if grad_bias is not None:
            grad_bias = grad_bias.to(bias.dtype)
        return grad_query, grad_key, grad_value, None, grad_bias, None, None


def attend_halos(
    query: torch.Tensor,
    key_tokens: torch.Tensor,
    value_tokens: torch.Tensor,
    halo: torch.Tensor,
    bias: torch.Tensor | None = None,
    module: str = "attend_halos",
) -> torch.Tensor:
    """[`attend`][groupattn.attention.attend] with keys and values gathered from tokens into halos.

    The same function as ``attend(query, gather(key_tokens), gather(value_tokens), bias)``
    with ``gather(t)[b·T + i] = t[b, halo[i]]`` laid out ``(B·T, heads, S·G, d)`` (halo
    position major, then ``G``); on the
    ``"chunked"`` implementation (a bias that requires a gradient, or forced) it keeps the
    tokens for the backward pass instead of the halos, which hold every token once per halo
    it falls in (about four times for 5 × 5 windows by 4 × 4 tiles).

    Parameters
    ----------
    query
        ``(B·T, heads, Q, d)``.
    key_tokens, value_tokens
        ``(B, N, G, heads, d)``.
    halo
        Long ``(T, S)``: the tokens of each tile's halo, entries in ``[0, N)``.
    bias
        Broadcastable to ``(B·T, heads, Q, S·G)`` and 4-D, or ``None``.
    module
        Name used in error messages.

    Returns
    -------
    torch.Tensor
        ``(B·T, heads, Q, d)``.
    """
    if bias is not None:
        bias = bias.to(query.dtype)
    if choose_implementation(query, bias, 0.0, module=module) == "chunked":
        if bias is None:
            bias = query.new_zeros(1, 1, 1, 1)
        return _AttendHalos.apply(  # type: ignore[no-any-return]
            query,
            _head_major(key_tokens),
            _head_major(value_tokens),
            halo,
            bias,
            _chunk_elements,
            module,
        )
    tiles = query.shape[0]
    key_tokens, value_tokens = _head_major(key_tokens), _head_major(value_tokens)
    rows = _halo_rows(key_tokens, halo, 0, tiles)
    key = _gather_halos(key_tokens, rows, tiles, halo.shape[1])
    value = _gather_halos(value_tokens, rows, tiles, halo.shape[1])
    return attend(query, key, value, bias, module=module)


def _head_major(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, N, G, heads, d)`` → contiguous ``(B, heads, N, G, d)``."""
    return tokens.permute(0, 3, 1, 2, 4).contiguous()


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precisions accumulate in float32; float32 and float64 compute in themselves."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


class _Windows:
    """The flat layout of the factorised kernel, for one ``(B, H, W)`` grid and window ``k``.

    Tensors are channels first over the *padded* grid ``(B, H + 2r, W + 2r)``, flattened to
    ``M = B (H + 2r)(W + 2r)`` positions (leading dims: heads, channels). A key or value
    tensor holds the wrapped (or zero-padded) grid, followed by ``slack`` zeros; a pixel
    ``(y, x)`` is *anchored* at the flat position ``a`` of padded ``(y, x)``, the top-left
    corner of its window, so the key at window offset ``t = (dy, dx)`` sits at ``a + δ_t`` with
    ``δ_t = dy (W + 2r) + dx``: the keys of every pixel at one offset are the contiguous slice
    ``[δ_t, δ_t + M)``, and those of one window row of offsets one overlapping view
    (``row``). Anchors that are not pixels (``y ≥ H`` or ``x ≥ W``) hold zero queries and
    zero gradients and are dropped.
    """

    def __init__(self, b: int, height: int, width: int, k: int, circular: bool) -> None:
        self.b, self.height, self.width, self.k, self.circular = b, height, width, k, circular
        self.r = k // 2
        self.hp, self.wp = height + 2 * self.r, width + 2 * self.r
        self.m = b * self.hp * self.wp
        self.shifts = [dy * self.wp + dx for dy in range(k) for dx in range(k)]  # row-major
        self.slack = self.shifts[-1]

    def grid(self, flat: torch.Tensor) -> torch.Tensor:
        """``(…, M + slack)`` or ``(…, M)`` → the padded grid ``(…, B, H + 2r, W + 2r)`` (a view)."""
        return flat[..., : self.m].view(*flat.shape[:-1], self.b, self.hp, self.wp)

    def pixels(self, flat: torch.Tensor) -> torch.Tensor:
        """Anchored ``(…, M)`` → the pixels' ``(…, B, H, W)`` (a view)."""
        return self.grid(flat)[..., : self.height, : self.width]

    def shifted(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The keys (or values) of every anchor at each offset: ``k²`` views ``(…, M)``."""
        return [flat[..., s : s + self.m] for s in self.shifts]

    def row(self, flat: torch.Tensor, dy: int) -> torch.Tensor:
        """The keys (or values) of every anchor at the ``k`` offsets of window row ``dy``:
        ``(k, n, c, M)``, an overlapping view of ``flat`` ``(n, c, M + slack)`` (read only)."""
        start = dy * self.wp
        window = flat[..., start : start + self.m + self.k - 1].unfold(-1, self.m, 1)
        return window.permute(2, 0, 1, 3)

    def fill(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Pixels ``(…, B, H, W)`` → the padded buffer ``out`` ``(…, M + slack)`` (in place; its
        zero padding and slack are left as they are: zero)."""
        r, height, width = self.r, self.height, self.width
        grid = self.grid(out)
        grid[..., r : r + height, r : r + width] = x
        if self.circular and r:  # columns on the centre rows, then whole rows (with corners)
            grid[..., r : r + height, :r] = grid[..., r : r + height, width : width + r]
            grid[..., r : r + height, r + width :] = grid[..., r : r + height, r : 2 * r]
            grid[..., :r, :] = grid[..., height : height + r, :]
            grid[..., r + height :, :] = grid[..., r : 2 * r, :]
        return out

    def fold(self, flat: torch.Tensor) -> torch.Tensor:
        """The adjoint of ``fill`` (in place): a padded gradient ``(…, M + slack)`` folded
        back onto the pixels ``(…, B, H, W)`` — wrapped borders added where they came from, or
        dropped (zero padding). The slack receives only zeros (from non-pixel anchors)."""
        r, height, width = self.r, self.height, self.width
        grid = self.grid(flat)
        if self.circular and r:  # the pad's steps in reverse: whole rows, then columns
            grid[..., height : height + r, :] += grid[..., :r, :]
            grid[..., r : 2 * r, :] += grid[..., r + height :, :]
            grid[..., r : r + height, width : width + r] += grid[..., r : r + height, :r]
            grid[..., r : r + height, r : 2 * r] += grid[..., r : r + height, r + width :]
        return grid[..., r : r + height, r : r + width]


def _part(buffer: torch.Tensor, n: int) -> torch.Tensor:
    """A ``(k, size, …)`` buffer for a group of ``n ≤ size`` heads: itself, or for a smaller
    (last) group a new ``(k, n, …)`` tensor (``out=`` takes a whole contiguous tensor: a view
    into the buffer would not survive ``torch.compile``'s functionalisation)."""
    if n == buffer.shape[1]:
        return buffer
    return buffer.new_empty(buffer.shape[0], n, *buffer.shape[2:])


def _head_groups(heads: int, channels: int) -> list[tuple[int, int]]:
    """Heads processed together: about 32 channels at once (narrow heads in one group, wide
    heads one by one), so that each elementwise step is long enough to amortise its call."""
    size = max(1, min(heads, 32 // max(1, channels)))
    return [(e, min(heads, e + size)) for e in range(0, heads, size)]


class _Inputs:
    """The scaled anchored queries and padded keys and values, channels first (one transposing
    copy per input), ``(n, c, …)`` per group of heads. Without ``keep`` one group's buffers are
    reused; with it every head's are kept, for the backward pass to reuse."""

    def __init__(
        self,
        windows: _Windows,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        dtype: torch.dtype,
        size: int,
        keep: bool,
    ) -> None:
        heads, d, d_v = query.shape[1], query.shape[2], value.shape[2]
        self.windows, self.query, self.key, self.value = windows, query, key, value
        self.scale = d**-0.5
        n = heads if keep else size
        m, padded = windows.m, windows.m + windows.slack
        self.all_q = query.new_zeros(n, d, m, dtype=dtype)  # 0 at non-pixel anchors
        self.all_keys = query.new_zeros(n, d, padded, dtype=dtype)
        self.all_values = query.new_zeros(n, d_v, padded, dtype=dtype)
        self.keep = keep

    def load(self, e0: int, e1: int) -> None:
        """Fill the buffers with the inputs of heads ``e0 … e1 − 1``."""
        at = slice(e0, e1) if self.keep else slice(0, e1 - e0)
        self.q, self.keys, self.values = self.all_q[at], self.all_keys[at], self.all_values[at]
        windows = self.windows
        windows.pixels(self.q).copy_(self.query[:, e0:e1].permute(1, 2, 0, 3, 4))
        self.q.mul_(self.scale)
        windows.fill(self.keys, self.key[:, e0:e1].permute(1, 2, 0, 3, 4))
        windows.fill(self.values, self.value[:, e0:e1].permute(1, 2, 0, 3, 4))


def _factorised_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    k: int,
    circular: bool,
    keep: bool = False,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, _Inputs]:
    """The factorised kernel, by groups of heads: ``(out, weights, denominators, inputs)``.

    ``query`` / ``key`` / ``value`` ``(B, heads, c, H, W)`` (any strides), ``table``
    ``(heads, G, k²)`` = ``exp(bias − max)`` in the compute dtype. ``out`` is
    ``(B, heads, G, d_v, H, W)``, a view of a contiguous ``(heads, d_v, G, B, H, W)`` tensor in
    the query's dtype; with ``keep`` (for the backward pass) also ``weights`` per group of
    ``n`` heads (``_head_groups``) ``(k², n, M)`` = ``exp(c − max_δ c)``,
    ``denominators`` ``(heads, G, M)``, anchored (see ``_Windows``), in the compute
    dtype, and ``inputs``, every head's channels-first inputs (without ``keep`` these are
    buffers reused from group to group: the last group's contents).
    """
    b, heads, d, height, width = query.shape
    d_v = value.shape[2]
    g, window = table.shape[1], table.shape[2]
    dtype = table.dtype
    windows = _Windows(b, height, width, k, circular)
    m = windows.m
    groups = _head_groups(heads, max(d, d_v))
    size = groups[0][1]
    inputs = _Inputs(windows, query, key, value, dtype, size, keep)
    out = query.new_empty(heads, d_v, g, b, height, width)
    all_weights = []  # kept per group for the backward pass; otherwise one buffer, reused
    weights_buffer = None if keep else table.new_empty(window, size, m)
    all_denominators = table.new_empty(heads if keep else size, g, m)
    products = table.new_empty(k, size, d, m)  # one window row of offsets at a time
    stacked = table.new_empty(k, size, d_v, m)
    numerator = table.new_empty(size, g, d_v * m)
    for e0, e1 in groups:
        n = e1 - e0
        inputs.load(e0, e1)
        weights = (
            table.new_empty(window, n, m) if weights_buffer is None else _part(weights_buffer, n)
        )
        for first in range(0, window, k):  # content logits q · k_{a+δ}
            rows = _part(products, n)
            torch.mul(inputs.q, windows.row(inputs.keys, first // k), out=rows)
            torch.sum(rows, 2, out=weights[first : first + k])
        weights.sub_(weights.amax(0, keepdim=True)).exp_()  # 1 at each window's maximum
        if keep:
            all_weights.append(weights)
        tab = table[e0:e1]  # (n, G, k²)
        at = slice(e0, e1) if keep else slice(0, n)
        denominators = torch.bmm(tab, weights.transpose(0, 1), out=all_denominators[at])
        numer = numerator[:n]
        for first in range(0, window, k):  # numerator: Σ_t T_gt w_t v_{a+δ_t}
            values = _part(stacked, n)
            row_weights = weights[first : first + k].unsqueeze(2)
            torch.mul(windows.row(inputs.values, first // k), row_weights, out=values)
            part, flat = tab[:, :, first : first + k], values.transpose(0, 1).flatten(2)
            if first == 0:
                torch.bmm(part, flat, out=numer)
            else:
                numer.baddbmm_(part, flat)
        pixel_numerators = windows.pixels(numer.view(n, g * d_v, m))
        torch.div(
            pixel_numerators.view(n, g, d_v, b, height, width).transpose(1, 2),
            windows.pixels(denominators).unsqueeze(1),
            out=out[e0:e1],
        )
    return out.permute(3, 0, 2, 1, 4, 5), all_weights, all_denominators, inputs


class _FactorisedWindows(torch.autograd.Function):
    """The factorised kernel with a recomputing backward: saves the channels-first inputs, the
    table, the output, the content weights ``w`` and the denominators ``D`` (``k² + G`` numbers
    per pixel and head), and recomputes the weighted values offset by offset in backward. With
    ``Gbar_g = G_g / D_g``, ``A_t = Σ_g T_gt Gbar_g``, ``s_g = Gbar_g · out_g``:
    ``dv_{i+δ_t} += w_t A_t``, ``dc_t = w_t A_t · v_t − w_t Σ_g T_gt s_g`` (the per-window maximum
    cancels), ``dq = Σ_t dc_t k_t / √d``, ``dk_{i+δ_t} += dc_t q_i / √d``,
    ``dT_gt = Σ_i w_t (Gbar_g · v_t − s_g)`` and ``dbias = T ⊙ dT`` (the per-slice maximum
    cancels too).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        bias: torch.Tensor,
        k: int,
        circular: bool,
        module: str,
    ) -> torch.Tensor:
        table = _window_table(bias, _compute_dtype(query.dtype))
        out, weights, denominators, inputs = _factorised_forward(
            query, key, value, table, k, circular, keep=True
        )
        ctx.save_for_backward(
            inputs.all_q, inputs.all_keys, inputs.all_values, table, denominators, out, *weights
        )
        ctx.window = (k, circular, tuple(query.shape), value.shape[2])
        ctx.dtypes = (query.dtype, key.dtype, value.dtype, bias.dtype)
        ctx.module = module
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        _refuse_double_backward(ctx.module, "factorised")
        all_q, all_keys, all_values, table, all_denominators, out, *all_weights = ctx.saved_tensors
        k, circular, shape, d_v = ctx.window
        q_dtype, k_dtype, v_dtype, bias_dtype = ctx.dtypes
        b, heads, d, height, width = shape
        g, window = table.shape[1], table.shape[2]
        windows = _Windows(b, height, width, k, circular)
        m = windows.m
        scale = d**-0.5
        groups = _head_groups(heads, max(d, d_v))
        size = groups[0][1]
        grad_q = out.new_empty(heads, d, b, height, width, dtype=q_dtype)
        grad_k = out.new_empty(heads, d, b, height, width, dtype=k_dtype)
        grad_v = out.new_empty(heads, d_v, b, height, width, dtype=v_dtype)
        grad_table = table.new_empty(heads, window, g)  # transposed: chunks of rows
        stacked = table.new_empty(k, size, d_v, m)  # w_t v_t
        a_buffer = table.new_empty(size, k, d_v, m)  # A_t
        scaled_buffer = table.new_zeros(size, g * d_v, m)  # Gbar, 0 at non-pixel anchors
        s_buffer = table.new_zeros(size, g, m)
        dots = table.new_empty(size, d_v, g, b, height, width)  # G ⊙ out before the sum
        a_dot_u = table.new_empty(size, window, m)  # A_t · (w_t v_t)
        grad_q_buffer = table.new_empty(size, d, m)
        grad_keys_buffer = table.new_zeros(size, d, m + windows.slack)
        grad_values_buffer = table.new_zeros(size, d_v, m + windows.slack)
        # (heads, d_v, G, B, H, W): views in the output's storage order
        grad_heads = grad_out.permute(1, 3, 2, 0, 4, 5)
        out_heads = out.permute(1, 3, 2, 0, 4, 5)
        for (e0, e1), weights in zip(groups, all_weights):
            n = e1 - e0
            q, keys, values = all_q[e0:e1], all_keys[e0:e1], all_values[e0:e1]
            w = weights.unsqueeze(2).unbind(0)  # (n, 1, M) each
            denominators = all_denominators[e0:e1]  # (n, G, M)
            tab = table[e0:e1]  # (n, G, k²)
            scaled_grad = scaled_buffer[:n]
            grad_e = grad_heads[e0:e1]  # (n, d_v, G, B, H, W)
            pixel_grad = windows.pixels(scaled_grad).view(n, g, d_v, b, height, width)
            pixel_grad.copy_(grad_e.transpose(1, 2))
            scaled_grad.view(n, g, d_v, m).div_(denominators.unsqueeze(2))
            flat_grad = scaled_grad.view(n, g, d_v * m)
            s = s_buffer[:n]
            torch.mul(grad_e, out_heads[e0:e1], out=dots[:n])
            windows.pixels(s).copy_(dots[:n].sum(1))
            s.div_(denominators)  # s_g = Gbar_g · out_g
            grad_values = grad_values_buffer[:n].zero_()
            grad_value_at = windows.shifted(grad_values)
            a, products, dot = a_buffer[:n], _part(stacked, n), a_dot_u[:n]
            for first in range(0, window, k):
                row_weights = weights[first : first + k].unsqueeze(2)
                torch.mul(windows.row(values, first // k), row_weights, out=products)
                flat = products.transpose(0, 1).flatten(2)  # (n, k, d_v·M)
                part = tab[:, :, first : first + k]  # (n, G, k)
                grad_table[e0:e1, first : first + k] = torch.bmm(flat, flat_grad.transpose(1, 2))
                torch.bmm(part.transpose(1, 2), flat_grad, out=a.view(n, k, d_v * m))
                for j in range(k):
                    grad_value_at[first + j].addcmul_(a[:, j], w[first + j])
                dot[:, first : first + k] = a.mul_(products.transpose(0, 1)).sum(2)
            # dc = w_t (A_t · v_t − Σ_g T_gt s_g): (n, k², M)
            grad_logits = dot.sub_(weights.transpose(0, 1) * torch.bmm(tab.transpose(1, 2), s))
            grad_table[e0:e1] -= torch.bmm(weights.transpose(0, 1), s.transpose(1, 2))
            grad_qa = grad_q_buffer[:n].zero_()
            grad_keys = grad_keys_buffer[:n].zero_()
            key_at, grad_key_at = windows.shifted(keys), windows.shifted(grad_keys)
            for t, coefficient in enumerate(grad_logits.unsqueeze(2).unbind(1)):  # (n, 1, M)
                grad_qa.addcmul_(key_at[t], coefficient)
                grad_key_at[t].addcmul_(q, coefficient)
            grad_q[e0:e1] = windows.pixels(grad_qa.mul_(scale))
            grad_k[e0:e1] = windows.fold(grad_keys)
            grad_v[e0:e1] = windows.fold(grad_values)
        grad_bias = (table * grad_table.transpose(1, 2)).to(bias_dtype)
        return (
            grad_q.permute(2, 0, 1, 3, 4),
            grad_k.permute(2, 0, 1, 3, 4),
            grad_v.permute(2, 0, 1, 3, 4),
            grad_bias,
            None,
            None,
            None,
        )


def _window_table(bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``T = exp(bias − max)`` per head and output slice, ``(heads, G, k²)`` in ``dtype``."""
    bias = bias.to(dtype)
    return torch.exp(bias - bias.amax(-1, keepdim=True))


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
        ``(B, heads, G, d_v, H, W)`` (a view of a contiguous ``(heads, d_v, G, B, H, W)``
        tensor, with or without gradients); ``None`` when the bias spreads by more than the
        dtype's safe range within a window (then the normaliser could underflow and the
        caller should use [`attend`][groupattn.attention.attend]). The check reads the bias's values, so it is
        skipped while ``torch.compile`` traces.

    Raises
    ------
    ValueError
        For inconsistent shapes or an even, non-positive or oversized neighbourhood.

    Notes
    -----
    By groups of heads (about 32 channels at once), channels first over the padded grid
    flattened to one axis (see ``_Windows``): the keys and values of every pixel at one
    window offset are one contiguous slice, and those of a window row of ``k`` offsets one
    overlapping view, so each row of offsets costs a few long vectorised operations — the
    content logits ``q · k_{i+δ}`` (products summed over channels) and the weighted values
    ``w_t · v_t``, accumulated into the ``G`` numerators by one matrix product with the
    table per window row (never all ``k²`` weighted values at once). Half precisions
    compute in float32. With gradients a custom autograd function saves the channels-first
    inputs, the table, the output and, per pixel and head, the ``k²`` content weights and
    ``G`` denominators, and *recomputes* the weighted values in backward (formulas in
    ``_FactorisedWindows``); double backward is not supported: a backward pass with
    ``create_graph=True`` raises ``ConfigurationError``. Nothing reads
    tensor values on the host: it compiles with ``torch.compile(fullgraph=True)``.
    """
    heads, height, width = query.shape[1], query.shape[3], query.shape[4]
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
    if torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value, bias)):
        return _FactorisedWindows.apply(  # type: ignore[no-any-return]
            query, key, value, bias, k, circular, module
        )
    table = _window_table(bias, _compute_dtype(query.dtype))
    return _factorised_forward(query, key, value, table, k, circular)[0]
