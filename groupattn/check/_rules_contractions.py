"""Rules for contractions: matrix products, linear layers, einsum and attention.

Registered in ``._aten.RULES`` when ``._aten`` is imported.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._aten import OpCall, rule
from ._maps import coordinates, value_classes
from ._semantics import contract, movement, normalize, pointwise, reduce
from ._values import Breaks, Constant, Moving, Unverifiable

# ----------------------------------------------------------------------------- linear algebra

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _fresh(n: int, used: str = "") -> str:
    pool = [c for c in _LETTERS + _LETTERS.upper() if c not in used]
    return "".join(pool[:n])


def _matmul(call: OpCall, a: Any, b: Any) -> Moving:
    sa, sb = _value_shape(a), _value_shape(b)
    if len(sa) == 0 or len(sb) == 0:
        raise Unverifiable(f"{call.label}: matmul of a 0-d tensor")
    da, db = len(sa), len(sb)
    if da == 1 and db == 1:
        return contract(a, "k", b, "k", "", call.out_dtype(), call.label)
    if da == 1:
        a = _reshape(call, a, (1, sa[0]))
        out = _matmul_nd(call, a, b, squeeze_a=True)
        return out
    if db == 1:
        b = _reshape(call, b, (sb[0], 1))
        return _matmul_nd(call, a, b, squeeze_b=True)
    return _matmul_nd(call, a, b)


def _matmul_nd(
    call: OpCall, a: Any, b: Any, squeeze_a: bool = False, squeeze_b: bool = False
) -> Moving:
    sa, sb = _value_shape(a), _value_shape(b)
    ba, bb = sa[:-2], sb[:-2]
    nb = max(len(ba), len(bb))
    batch_letters = _fresh(nb, "ijk")
    la_batch = ""
    lb_batch = ""
    ba_p = (1,) * (nb - len(ba)) + tuple(ba)
    bb_p = (1,) * (nb - len(bb)) + tuple(bb)
    keep_a, keep_b = [], []
    for i, (x, y) in enumerate(zip(ba_p, bb_p)):
        ch = batch_letters[i]
        if i >= nb - len(ba):
            keep_a.append((ch, x))
        if i >= nb - len(bb):
            keep_b.append((ch, y))
    # drop size-1 broadcast dims from an operand whose partner has size > 1
    sizes = {ch: max(x, y) for ch, x, y in zip(batch_letters, ba_p, bb_p)}
    a_dims = [ch for ch, s in keep_a if not (s == 1 and sizes[ch] > 1)]
    b_dims = [ch for ch, s in keep_b if not (s == 1 and sizes[ch] > 1)]
    a = _reshape(call, a, tuple(sizes[c] for c in a_dims) + tuple(sa[-2:]))
    b = _reshape(call, b, tuple(sizes[c] for c in b_dims) + tuple(sb[-2:]))
    la_batch, lb_batch = "".join(a_dims), "".join(b_dims)
    out_batch = "".join(c for c in batch_letters if sizes[c] > 1 or c in a_dims or c in b_dims)
    out_batch = "".join(c for c in batch_letters if c in a_dims or c in b_dims)
    lo = out_batch + ("" if squeeze_a else "i") + ("" if squeeze_b else "j")
    la = la_batch + "ik"
    lb = lb_batch + "kj"
    if squeeze_a:
        a = _reshape(call, a, (*_value_shape(a)[:-2], _value_shape(a)[-1]))
        la = la_batch + "k"
    if squeeze_b:
        b = _reshape(call, b, (*_value_shape(b)[:-2], _value_shape(b)[-2]))
        lb = lb_batch + "k"
    out = contract(a, la, b, lb, lo, call.out_dtype(), call.label)
    return _reshape(call, out, call.out_shape())


def _value_shape(v: Any) -> tuple[int, ...]:
    if isinstance(v, Moving):
        return v.shape
    if isinstance(v, Constant) and isinstance(v.first, torch.Tensor):
        return tuple(v.first.shape)
    raise Unverifiable("expected a tensor operand")


def _reshape(call: OpCall, v: Any, shape: tuple[int, ...]) -> Any:
    if _value_shape(v) == tuple(shape):
        return v
    return movement(lambda d: d[0].reshape(shape), [v], call.label)[0]


def _permute(call: OpCall, v: Any, perm: list[int]) -> Any:
    if perm == list(range(len(perm))):
        return v
    return movement(lambda d: d[0].permute(perm), [v], call.label)[0]


@rule("aten::inner")
def _inner(call: OpCall) -> Any:
    a, b = call.args["self"], call.args["other"]
    sa, sb = _value_shape(a), _value_shape(b)
    if not sa or not sb:
        raise Unverifiable(f"{call.label}: inner product with a 0-d tensor")
    la = _fresh(len(sa) - 1, "k")
    lb = _fresh(len(sa) - 1 + len(sb) - 1, "k")[len(sa) - 1 :]
    return contract(a, la + "k", b, lb + "k", la + lb, call.out_dtype(), call.label)


@rule("aten::matmul")
def _matmul_rule(call: OpCall) -> Any:
    return _matmul(call, call.args["self"], call.args["other"])


@rule("aten::mm", "aten::bmm", "aten::mv", "aten::dot", "aten::vdot")
def _mm(call: OpCall) -> Any:
    other = (
        "mat2"
        if "mat2" in call.args.values
        else (
            "vec"
            if "vec" in call.args.values
            else ("tensor" if "tensor" in call.args.values else "other")
        )
    )
    return _matmul(call, call.args["self"], call.args[other])


@rule("aten::addmm", "aten::baddbmm", "aten::addmv", "aten::addbmm")
def _addmm(call: OpCall) -> Any:
    packet = call.target._schema.name
    call.args.touch("beta", "alpha")
    if packet == "aten::addbmm":
        raise Unverifiable(f"{call.label}: addbmm is not supported")
    first, second = (
        ("mat", "vec")
        if packet == "aten::addmv"
        else (("batch1", "batch2") if packet == "aten::baddbmm" else ("mat1", "mat2"))
    )
    prod = _matmul(call, call.args[first], call.args[second])
    return pointwise([prod, call.args["self"]], call.out_shape(), call.out_dtype(), call.label)


# ----------------------------------------------------------------------------- row maps (fast paths)


def _row_maps(x: Moving, n: int) -> list[torch.Tensor] | None:
    """Per generator, the map of the rows of ``x`` viewed as ``(-1, n)`` when the group only
    permutes whole rows (the last ``n`` entries of each row stay in order); else ``None``.

    Token layouts moved by translations or by a canonicalizer's per-sample element move
    tokens, never channels: layers that act row by row (linear maps, layer norms,
    attention over rows) then move by the same row map, which is far cheaper to derive
    than the general contraction rule.
    """
    if n <= 0 or x.numel % n:
        return None
    rows = x.numel // n
    if x.moves is None:
        return [torch.arange(rows) for _ in x.frame.generators]
    out = []
    offsets = torch.arange(n)
    for m in x.moves:
        m2 = m.reshape(rows, n)
        base = m2[:, 0]
        if bool((base % n != 0).any()) or not torch.equal(m2, base[:, None] + offsets):
            return None
        out.append(base // n)
    return out


def _with_rows(
    rows: list[torch.Tensor], n: int, shape: tuple[int, ...], dtype: torch.dtype, frame: Any
) -> Moving:
    """The value of ``shape`` whose rows of ``n`` entries move by ``rows``."""
    offsets = torch.arange(n)
    maps = [(r[:, None] * n + offsets).reshape(-1) for r in rows]
    return Moving(tuple(shape), dtype, frame, maps).normalised()


@rule("aten::linear")
def _linear(call: OpCall) -> Any:
    x, w, bias = call.args["input"], call.args["weight"], call.args["bias"]
    sx = _value_shape(x)
    if (
        isinstance(x, Moving)
        and isinstance(w, Constant)
        and not isinstance(bias, Moving)
        and len(_value_shape(w)) == 2
        and sx
    ):
        rows = _row_maps(x, sx[-1])
        if rows is not None:  # the same affine map on every row
            return _with_rows(
                rows, call.out_shape()[-1], call.out_shape(), call.out_dtype(), x.frame
            )
    lead = _fresh(len(sx) - 1, "kn")
    if len(_value_shape(w)) == 1:
        out = contract(x, lead + "k", w, "k", lead, call.out_dtype(), call.label)
    else:
        out = contract(x, lead + "k", w, "nk", lead + "n", call.out_dtype(), call.label)
    if bias is not None:
        out = pointwise([out, bias], call.out_shape(), call.out_dtype(), call.label)
    return out


@rule("aten::einsum")
def _einsum(call: OpCall) -> Any:
    equation = str(call.args["equation"]).replace(" ", "")
    operands = list(call.args["tensors"])
    call.args.touch("path")
    if "->" not in equation:
        raise Unverifiable(f"{call.label}: implicit einsum output")
    lhs, lo = equation.split("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise Unverifiable(f"{call.label}: operands do not match the equation")
    if len(ins) == 1:
        term = ins[0]
        if "..." in term or len(set(term)) != len(term) or set(lo) - set(term):
            raise Unverifiable(f"{call.label}: this one-operand einsum form is not supported")
        x = operands[0]
        summed = [i for i, ch in enumerate(term) if ch not in lo]
        kept = [ch for ch in term if ch in lo]
        if summed:
            if not isinstance(x, Moving):
                raise Unverifiable(f"{call.label}: no operand depends on the input")
            sizes = [int(s) for s in x.shape]
            x = reduce(
                x,
                summed,
                tuple(sizes[i] for i, ch in enumerate(term) if ch in lo),
                call.out_dtype(),
                call.label,
            )
        perm = [kept.index(ch) for ch in lo]
        return _permute(call, x, perm)
    if len(ins) != 2:
        raise Unverifiable(f"{call.label}: einsum over more than two operands")
    if "..." in equation:
        used = "".join(c for c in equation if c.isalpha())
        expanded = []
        for term, v in zip(ins, operands):
            if "..." in term:
                n = len(_value_shape(v)) - (len(term) - 3)
                expanded.append(term.replace("...", _fresh(n, used)[-n:] if n else ""))
            else:
                expanded.append(term)
        nmax = max(len(_value_shape(v)) - (len(t) - 3) for t, v in zip(ins, operands) if "..." in t)
        lo = lo.replace("...", _fresh(nmax, used)[-nmax:] if nmax else "")
        ins = expanded
    return contract(operands[0], ins[0], operands[1], ins[1], lo, call.out_dtype(), call.label)


@rule("aten::scaled_dot_product_attention")
def _sdpa(call: OpCall) -> Any:
    q, k, v = call.args["query"], call.args["key"], call.args["value"]
    mask, dropout, causal = call.args["attn_mask"], call.args["dropout_p"], call.args["is_causal"]
    call.args.touch("scale")
    if call.args.get("enable_gqa", False):
        raise Unverifiable(f"{call.label}: grouped-query attention is not supported")
    if float(dropout) != 0.0:
        raise Unverifiable(f"{call.label}: draws random numbers (attention dropout)")
    fast = _sdpa_rows(call, q, k, v, mask, bool(causal))
    if fast is not None:
        return fast
    sq, sk = _value_shape(q), _value_shape(k)
    k, v = _keys_up_to_permutation(call, q, k, v, mask)
    lead = _fresh(len(sq) - 2, "ijd")
    scores = contract(q, lead + "id", k, lead + "jd", lead + "ij", call.out_dtype(), call.label)
    if mask is not None:
        scores = pointwise([scores, mask], scores.shape, call.out_dtype(), call.label + " mask")
    if causal:
        tri = torch.ones(sq[-2], sk[-2], dtype=torch.bool).tril()
        scores = pointwise(
            [scores, Constant(tri, tri)],
            scores.shape,
            call.out_dtype(),
            call.label + " causal mask",
        )
    weights = normalize(scores, [len(scores.shape) - 1], call.out_dtype(), call.label + " softmax")
    return contract(weights, lead + "ij", v, lead + "je", lead + "ie", call.out_dtype(), call.label)


def _sdpa_rows(call: OpCall, q: Any, k: Any, v: Any, mask: Any, causal: bool) -> Moving | None:
    """Attention whose operands move by whole rows: queries by ``(block, l) → (β(block), λ(l))``,
    keys and values by one permutation inside the image block ``β(block)`` — the output
    moves like the queries (the softmax sums over all keys of the block in any order). A
    constant mask must be unchanged by the moves; otherwise (or with a causal mask, an
    input-dependent mask, operands from different frames) the general rule decides.
    """
    if causal or not all(isinstance(t, Moving) for t in (q, k, v)) or isinstance(mask, Moving):
        return None
    if mask is not None and not (
        isinstance(mask, Constant) and isinstance(mask.first, torch.Tensor)
    ):
        return None
    active = [t for t in (q, k, v) if not t.invariant]
    if not active or any(t.frame is not active[0].frame for t in active):
        return None
    frame = active[0].frame
    sq, sk, sv = q.shape, k.shape, v.shape
    if len(sq) < 2 or sq[:-2] != sk[:-2] or sk[:-1] != sv[:-1] or sq[-1] != sk[-1]:
        return None
    L, S = sq[-2], sk[-2]
    blocks = math.prod(sq[:-2])
    rq, rk, rv = _row_maps(q, sq[-1]), _row_maps(k, sk[-1]), _row_maps(v, sv[-1])
    if rq is None or rk is None or rv is None:
        return None
    if len(rq) != len(frame.generators):
        return None
    classes = None
    if mask is not None:
        full = (*sq[:-1], S)
        try:
            first = mask.first.expand(full).reshape(-1)
            second = mask.second.expand(full).reshape(-1)
        except RuntimeError:
            return None
        third = mask.third.expand(full).reshape(-1) if mask.third is not None else None
        classes = value_classes(first, second, third, exact=mask.exact)
    for a, b, c in zip(rq, rk, rv):
        if not torch.equal(b, c):
            return None
        qa, kb = a.reshape(blocks, L), b.reshape(blocks, S)
        beta = qa[:, :1] // L
        if not torch.equal(qa // L, beta.expand(blocks, L)) or not torch.equal(
            kb // S, beta.expand(blocks, S)
        ):
            return None
        if classes is not None:
            scores = (qa[:, :, None] * S + (kb % S)[:, None, :]).reshape(-1)
            if not torch.equal(classes[scores], classes):
                return None
    return _with_rows(rq, sv[-1], call.out_shape(), call.out_dtype(), frame)


def _key_axis_sources(value: Moving, what: str) -> list[torch.Tensor] | None:
    """Per generator, the key-axis source of each (…, key) position if the map only
    permutes keys inside each (…) slice (and is the same for every channel)."""
    shape = value.shape
    axis = len(shape) - 2
    out = []
    own = coordinates(torch.arange(value.numel), shape)
    for m in value.maps():
        src = coordinates(m, shape)
        for d in range(len(shape)):
            if d != axis and not torch.equal(src[d], own[d]):
                return None
        key = src[axis].reshape(shape)
        if not bool((key == key.narrow(-1, 0, 1)).all()):
            return None
        rows = key[..., 0].reshape(-1, shape[axis])
        if not bool((rows.sort(dim=1).values == torch.arange(shape[axis])).all()):
            return None
        out.append(key[..., 0])
    return out


def _keys_up_to_permutation(call: OpCall, q: Any, k: Any, v: Any, mask: Any) -> tuple[Any, Any]:
    """Keys and values in another frame than the queries, moved only by permuting the
    key axis (the same way for both), count as invariant: attention without a positional
    bias sums over the keys, so it does not see their order."""
    if not (isinstance(q, Moving) and isinstance(k, Moving) and isinstance(v, Moving)):
        return k, v
    if q.invariant or k.invariant or k.frame is q.frame or k.frame is not v.frame:
        return k, v
    if mask is not None:
        raise Unverifiable(f"{call.label}: a mask with keys and queries in different frames")
    ks, vs = _key_axis_sources(k, call.label), _key_axis_sources(v, call.label)
    if ks is None or vs is None or any(not torch.equal(a, b) for a, b in zip(ks, vs)):
        raise Breaks(
            f"{call.label} combines tensors from different frames: {q.frame.describe()} (queries) and "
            f"{k.frame.describe()} (keys and values), and the keys move other than by reordering"
        )
    return Moving(k.shape, k.dtype, q.frame, None), Moving(v.shape, v.dtype, q.frame, None)
