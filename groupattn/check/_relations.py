"""Relations between values: an orbit of tensors that the group permutes.

A claim of ``._values`` relates a value to *itself*: ``v(g·x) = v(x)[m]``. Some
equivariant networks have intermediates with no such claim, because the group moves
them onto *each other*: in the orbit average ``Σ_k rot⁻ᵏ f(rotᵏ x)`` of a plain
convolution ``f``, the term ``k`` at ``rot·x`` is the term ``k + 1`` at ``x``; in the
paired soft-max ``softmax(x, -1) + softmax(xᵀ, -1)ᵀ`` a quarter turn swaps the two
terms. This module derives such *relations*

    ``v(g·x) = w(x).flatten()[m]``        for every input ``x``

for a generator ``g``, another node ``w`` of the graph and a gather map ``m``, and
closes them at the nodes that combine an orbit symmetrically:

- an **n-ary sum** (a tree of ``add`` nodes; likewise a tree of ``mul``, ``maximum`` or
  ``minimum``, the operators symmetric in their operands): if every term at ``g·x`` is
  another term at ``x`` gathered by one common map ``m``, and the terms are matched one
  to one, the sum moves by ``m`` — an ordinary claim again; a sum also relates to
  another sum of the same operator whose terms its terms move onto;
- a **stack** or **concatenation** of equal pieces: if each piece at ``g·x`` is another
  piece at ``x`` (one to one, any maps), the result moves by the map that permutes the
  pieces and moves inside them; a later symmetric reduction over the pieces is then an
  ordinary rule.

Relations come from three exact sources, each valid for every input:

1. **claims** — a value with a claim ``v(g·x) = v(x)[m]`` relates to itself;
2. **data movement** — a value computed by pure data movement from a *root*
   ``v = r[P]`` (``P`` read off the operation on index probes) relates to whatever its
   root relates to: if ``r(g·x) = w(x)[T]`` then ``v(g·x) = w(x)[T[P]]``, and to any
   other copy ``z = w[Q]`` of the same entries: ``v(g·x) = z(x)[Q⁻¹[T[P]]]``;
3. **congruence** — if ``y = op(a, c)`` and ``a(g·x) = z(x)[m]`` and the graph also
   computes ``y' = op(z, c)`` (same operator, same constant arguments), then
   ``y(g·x) = op(z(x)[m], c) = y'(x)[M]`` where ``M`` is the map the operator's own rule
   derives from ``m`` (rules prove ``op(u[m], c) = op(u, c)[M]`` for every ``u``). When
   every ``m`` is the identity (``a(g·x) = z(x)`` entry for entry), ``y(g·x) = y'(x)``
   for *any* deterministic operator — no rule is needed: this is what relates the
   copies of a backbone that frame averaging runs on ``g⁻¹·x`` however the backbone
   computes (batch norms, ``unbind`` and other operators with several outputs, read
   through ``getitem``, included). Operators tagged nondeterministic take part only
   through their rules.

Only the input frame is related (canonicalizer frames are left to the ordinary
claims), only ATen operators with a rule take part, and every candidate list is capped,
so the search is small; a relation that is not found only costs completeness.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import os
from typing import Any

import torch

from ._aten import RANDOM_OPS_WITH_RULES, Args, OpCall, rule_for
from ._maps import constant_classes
from ._values import Constant, Frame, Moving

__all__ = ["Relations"]

#: Relations kept per value and generator.
MAX_RELATIONS = 8
#: Partners (node, map) of one value tried per generator.
MAX_PARTNERS = 16
#: Partner combinations tried per operation and generator.
MAX_COMBINATIONS = 32
#: Terms of one sum, or pieces of one stack, that are matched.
MAX_TERMS = 64
#: Graph nodes related before one closing node (beyond: not attempted).
MAX_NODES = 4000

#: Operators whose trees are symmetric in their operands (a sum, a product, a maximum, a
#: minimum): their operands form a multiset. Nothing else is (``a - b`` is not).
_SYMMETRIC = frozenset(
    {"aten::add.Tensor", "aten::mul.Tensor", "aten::maximum.default", "aten::minimum.default"}
)
_STACKING = ("aten::stack.default", "aten::cat.default")

_PURE_MOVEMENT = frozenset(
    {
        "aten::view",
        "aten::reshape",
        "aten::_unsafe_view",
        "aten::expand",
        "aten::permute",
        "aten::transpose",
        "aten::t",
        "aten::mT",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::slice",
        "aten::select",
        "aten::narrow",
        "aten::flip",
        "aten::roll",
        "aten::rot90",
        "aten::alias",
        "aten::detach",
        "aten::clone",
        "aten::contiguous",
        "aten::lift_fresh_copy",
        "aten::movedim",
        "aten::flatten",
        "aten::unflatten",
        "aten::diagonal",
        "aten::repeat",
        "aten::index_select",
        "aten::pixel_shuffle",
        "aten::pixel_unshuffle",
        "aten::_pad_circular",
        "aten::circular_pad2d",
        "aten::circular_pad1d",
        "aten::pad",
    }
)


def _exact_name(target: Any) -> str:
    schema = target._schema
    return f"{schema.name}.{schema.overload_name or 'default'}"


def _tensor_meta(node: Any) -> Any:
    meta = node.meta.get("val")
    return meta if isinstance(meta, torch.Tensor) else None


def _shape(node: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in node.meta["val"].shape)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _digest(value: Any) -> Any:
    """An exact key for a constant (both parameter draws and the current parameters)."""
    parts: list[Any] = []
    for v in (value.first, value.second, value.current):
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            h = hashlib.sha1(
                t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            )
            parts.append((tuple(t.shape), str(t.dtype), h.hexdigest()))
        else:
            parts.append(repr(v))
    return ("const", tuple(parts))


def _literal(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return (type(v).__name__, tuple(_literal(x) for x in v))
    return ("lit", type(v).__name__, repr(v))


def _match(n: int, edges: list[list[int]]) -> list[int] | None:
    """A perfect matching of ``n`` left slots onto ``n`` right slots (Kuhn's algorithm)."""
    owner = [-1] * n

    def augment(i: int, seen: list[bool]) -> bool:
        for k in edges[i]:
            if seen[k]:
                continue
            seen[k] = True
            if owner[k] < 0 or augment(owner[k], seen):
                owner[k] = i
                return True
        return False

    for i in range(n):
        if not augment(i, [False] * n):
            return None
    sigma = [0] * n
    for k, i in enumerate(owner):
        sigma[i] = k
    return sigma


class Relations:
    """Relations between the values of one exported graph (see the module docstring).

    Parameters
    ----------
    values
        The propagation's values by node name (claims, constants, failures).
    frame
        The input frame: relations are made for its generators.
    graph
        The dependency graph built so far (node names).
    """

    def __init__(self, values: dict[str, Any], frame: Frame, graph: Any) -> None:
        self.values = values
        self.frame = frame
        self.graph = graph
        self.nodes: dict[str, Any] = {}
        self.family: dict[str, tuple[str, torch.Tensor]] = {}
        self.members: dict[str, list[tuple[str, torch.Tensor]]] = {}
        self.inverse: dict[str, torch.Tensor] = {}
        self.relations: dict[str, list[list[tuple[str, torch.Tensor]]]] = {}
        self.index: dict[Any, str] = {}
        self.templates: dict[str, tuple[Any, list[str]] | None] = {}
        self.digests: dict[str, Any] = {}
        self.single = [Frame("", frame.group, [g]) for g in frame.generators]
        self.known = 0
        self.sums: list[str] = []
        self.judged: dict[str, tuple[bool, bool]] = {}

    # ------------------------------------------------------------------------- public

    def add_node(self, node: Any) -> None:
        """Make ``node`` known (call for every node, in graph order)."""
        self.nodes[node.name] = node

    def repair(self, node: Any) -> Moving | None:
        """A claim for ``node`` (a sum, product, maximum or minimum tree, a stack or a
        concatenation) from relations between its operands.

        Returns ``None`` when the operands do not form an orbit the checker can match.
        """
        name = _exact_name(node.target) if hasattr(node.target, "_schema") else ""
        meta = _tensor_meta(node)
        if meta is None or name not in (*_SYMMETRIC, *_STACKING):
            return None
        try:
            if name in _SYMMETRIC:
                if any(_is_same_sum(u, node) for u in node.users):
                    return None  # a partial sum: the whole sum is matched at its last node
                self._prepare([node.name])
                return self._close_sum(node)
            pieces = node.args[0] if node.args else node.kwargs.get("tensors")
            if not isinstance(pieces, list | tuple) or not pieces or len(pieces) > MAX_TERMS:
                return None
            if not all(hasattr(p, "name") and _tensor_meta(p) is not None for p in pieces):
                return None
            if (
                len({_shape(p) for p in pieces}) != 1
                or set(node.kwargs) - {"dim"}
                or len(node.args) > 2
            ):
                return None
            self._prepare([node.name])
            return self._close_stack(node, [p.name for p in pieces])
        except (RuntimeError, ValueError, IndexError, TypeError):
            return None

    # ------------------------------------------------------------------------- preparation

    def _prepare(self, targets: list[str]) -> None:
        if len(self.nodes) != self.known:
            # relations found before later nodes existed may miss partners among them
            self.relations.clear()
            self.known = len(self.nodes)
        wanted: set[str] = set()
        for t in targets:
            wanted |= set(self.graph.predecessors(t)) if t in self.graph else set()
            wanted |= _ancestors(self.graph, t)
        order = [n for n in self.nodes if n in wanted and n not in self.relations]
        if len(order) > MAX_NODES:
            return
        for n in order:  # families first: a relation may name any copy of a root
            if n not in self.family and self._moving(n):
                self._set_family(self.nodes[n])
        for n in order:  # then every operation's key: a congruent partner may come later
            self._template(self.nodes[n])
            if _is_same_sum(self.nodes[n], self.nodes[n]) and n not in self.sums:
                self.sums.append(n)
        for n in order:
            self._relate(self.nodes[n])

    def _moving(self, name: str) -> bool:
        v = self.values.get(name)
        return (
            not isinstance(v, Constant) and _tensor_meta(self.nodes[name]) is not None
            if name in self.nodes
            else False
        )

    def _relate(self, node: Any) -> None:
        name = node.name
        gens = len(self.frame.generators)
        self.relations[name] = [[] for _ in range(gens)]
        if name not in self.family:
            return
        root, P = self.family[name]
        rel = self.relations[name]
        value = self.values.get(name)
        if isinstance(value, Moving) and value.invariant:
            for j in range(gens):
                rel[j].append((root, P))
        elif isinstance(value, Moving) and value.frame is self.frame and value.moves is not None:
            for j in range(gens):
                rel[j].append((root, P[value.moves[j]]))
        if root != name:
            for j in range(gens):
                for w, T in self.relations.get(root, [[] for _ in range(gens)])[j]:
                    self._add(rel[j], w, T[P])
        self._congruence(node)
        self._sum_relations(node)

    def _add(self, bucket: list[tuple[str, torch.Tensor]], root: str, T: torch.Tensor) -> None:
        if len(bucket) >= MAX_RELATIONS:
            return
        for w, U in bucket:
            if w == root and torch.equal(U, T):
                return
        bucket.append((root, T))

    # ------------------------------------------------------------------------- families

    def _set_family(self, node: Any) -> None:
        name = node.name
        numel = _numel(_shape(node))
        fam = None
        if (
            node.op == "call_function"
            and hasattr(node.target, "_schema")
            and node.target._schema.name in _PURE_MOVEMENT
            and _exact_name(node.target) != "aten::view.dtype"  # reinterprets bits: not a movement
        ):
            fam = self._gather_of(node)
        if fam is None:
            fam = (name, torch.arange(numel))
        self.family[name] = fam
        self.members.setdefault(fam[0], []).append((name, fam[1]))

    def _gather_of(self, node: Any) -> tuple[str, torch.Tensor] | None:
        """``(root, P)`` with ``node = root.flatten()[P]`` for a pure data movement of one operand."""
        data = [a for a in _flat_nodes((node.args, node.kwargs)) if self._moving(a.name)]
        if len(data) != 1 or data[0].name not in self.family:
            return None
        source = data[0]
        root, P_in = self.family[source.name]
        in_shape = _shape(source)

        def fill(v: Any, probe: torch.Tensor) -> Any:
            if hasattr(v, "name") and hasattr(v, "op"):
                if v.name == source.name:
                    return probe
                c = self.values.get(v.name)
                if isinstance(c, Constant) and c.structural:
                    return c.first
                raise ValueError("not a structural argument")
            if isinstance(v, list):
                return [fill(x, probe) for x in v]
            if isinstance(v, tuple):
                return tuple(fill(x, probe) for x in v)
            return v

        base = P_in.to(torch.float64).reshape(in_shape) + 1
        gap = float(P_in.numel() + _numel(in_shape) + 7)
        outs = []
        with torch.no_grad():
            for probe in (base, base + gap, base * 3):
                args = fill(node.args, probe)
                kwargs = {k: fill(v, probe) for k, v in node.kwargs.items()}
                out = node.target(*args, **kwargs)
                if not isinstance(out, torch.Tensor):
                    return None
                outs.append(out.reshape(-1).to(torch.float64))
        f1, f2, f3 = outs
        if tuple(outs[0].shape) != (_numel(_shape(node)),):
            return None
        if not bool(((f2 - f1 == gap) & (f3 == 3 * f1)).all()):
            return None
        return root, (f1 - 1).long()

    def _partners(
        self, name: str, j: int, shape: tuple[int, ...], allowed: set[str] | None = None
    ) -> list[tuple[str, torch.Tensor]]:
        """Nodes ``z`` of ``shape`` with ``name(g_j·x) = z(x)[m]``, as ``(z, m)``."""
        found: list[tuple[str, torch.Tensor]] = []
        for root, T in self.relations.get(name, [[]] * len(self.frame.generators))[j]:
            for z, P in self.members.get(root, []):
                if allowed is not None and z not in allowed:
                    continue
                if z not in self.nodes or _shape(self.nodes[z]) != shape:
                    continue
                inv = self.inverse.get(z)
                if inv is None:
                    inv = torch.full((_numel(_shape(self.nodes[root])),), -1, dtype=torch.long)
                    inv[P] = torch.arange(P.numel())
                    self.inverse[z] = inv
                m = inv[T]
                if bool((m < 0).any()):
                    continue
                if not any(w == z and torch.equal(u, m) for w, u in found):
                    found.append((z, m))
        # copies reached without moving come first: they make congruent partners
        found.sort(key=lambda zm: not torch.equal(zm[1], torch.arange(zm[1].numel())))
        return found[:MAX_PARTNERS]

    # ------------------------------------------------------------------------- congruence

    def _template(self, node: Any) -> tuple[Any, list[str]] | None:
        """The node's key with its input-dependent operands as slots, and those operands."""
        if node.name in self.templates:
            return self.templates[node.name]
        result: tuple[Any, list[str]] | None = None
        if node.op == "call_function" and _tensor_meta(node) is not None:
            slots: list[str] = []
            try:
                if hasattr(node.target, "_schema"):
                    if self._judge(node.target)[0]:
                        result = (self._call_key(node, slots), slots)
                elif node.target is operator.getitem and len(node.args) == 2:
                    # one output of an operator with several (unbind, split, a batch norm):
                    # the key of the call and the output's index
                    source, index = node.args
                    if (
                        isinstance(index, int)
                        and getattr(source, "op", None) == "call_function"
                        and hasattr(source.target, "_schema")
                        and self._judge(source.target)[0]
                        and _tensor_meta(source) is None
                    ):
                        result = (("getitem", self._call_key(source, slots), index), slots)
            except ValueError:
                result = None
        self.templates[node.name] = result
        if result is not None:
            self.index.setdefault(self._fill(result[0], result[1]), node.name)
        return result

    def _judge(self, target: Any) -> tuple[bool, bool]:
        """``judge_operator``, once per operator and certification (it reads the
        dispatcher's registration table)."""
        name = str(target)
        if name not in self.judged:
            self.judged[name] = judge_operator(target)
        return self.judged[name]

    def _call_key(self, node: Any, slots: list[str]) -> Any:
        return (
            str(node.target),
            self._key(node.args, slots),
            tuple(sorted((k, self._key(v, slots)) for k, v in node.kwargs.items())),
        )

    def _key(self, v: Any, slots: list[str]) -> Any:
        if hasattr(v, "name") and hasattr(v, "op"):
            value = self.values.get(v.name)
            if isinstance(value, Constant):
                if v.name not in self.digests:
                    self.digests[v.name] = _digest(value)
                return self.digests[v.name]
            if v.name not in self.nodes or _tensor_meta(self.nodes[v.name]) is None:
                raise ValueError("an operand that is not a tensor")
            slots.append(v.name)
            return ("slot", len(slots) - 1)
        if isinstance(v, list | tuple):
            return (type(v).__name__, tuple(self._key(x, slots) for x in v))
        return _literal(v)

    @staticmethod
    def _fill(key: Any, names: list[str]) -> Any:
        def walk(k: Any) -> Any:
            if isinstance(k, tuple) and len(k) == 2 and k[0] == "slot" and isinstance(k[1], int):
                return ("node", names[k[1]])
            if isinstance(k, tuple):
                return tuple(walk(x) for x in k)
            return k

        return walk(key)

    def _congruence(self, node: Any) -> None:
        template = self._template(node)
        if template is None:
            return
        key, slots = template
        if not slots:
            return
        rel = self.relations[node.name]
        if hasattr(node.target, "_schema"):
            source, rule = node.target, rule_for(node.target)
        else:  # getitem: one output of the operator that computed them all
            source, rule = node.args[0].target, None
        # only ATen's own deterministic operators are taken as functions of their operands
        deterministic = self._judge(source)[1]
        numel = _numel(_shape(node))
        for j in range(len(self.frame.generators)):
            options = [self._partners(a, j, _shape(self.nodes[a])) for a in slots]
            if any(not o for o in options):
                continue
            for combo in _combinations(slots, options):
                names = [z for z, _ in combo]
                if names == slots and isinstance(self.values.get(node.name), Moving):
                    continue  # the value's own claim is already a relation
                other = self.index.get(self._fill(key, names))
                if other is None or other not in self.family:
                    continue
                if _shape(self.nodes[other]) != _shape(node):
                    continue
                if deterministic and all(torch.equal(m, torch.arange(m.numel())) for _, m in combo):
                    # the same deterministic computation on equal operands: equal results
                    M: torch.Tensor | None = torch.arange(numel)
                elif rule is None:
                    continue
                else:
                    M = self._apply_rule(node, rule, slots, list(combo), j)
                if M is None:
                    continue
                root, P = self.family[other]
                self._add(rel[j], root, P[M])

    def _proxy(self, slot: str, partner: str, m: torch.Tensor, frame: Frame) -> Moving:
        """The operand ``slot`` at ``g·x`` as a value moving by ``m`` (``slot(g·x) = partner(x)[m]``).

        When the partner copies entries of its root more than once (circular padding, an
        expand), the proxy also says so: it is the partner's gather ``P`` of a root that
        moves by ``W`` with ``W[P] = P[m]``, which lets the rules match the copies (as
        for the claims of ``._semantics``).
        """
        meta = _tensor_meta(self.nodes[slot])
        shape = tuple(int(s) for s in meta.shape)
        proxy = Moving(shape, meta.dtype, frame, [m]).normalised()
        root, P = self.family[partner]
        if root == partner or int(torch.unique(P).numel()) == P.numel():
            return proxy
        T = P[m]
        W = torch.arange(_numel(_shape(self.nodes[root])))
        W[P] = T
        if not torch.equal(W[P], T) or not torch.equal(
            torch.sort(W).values, torch.arange(W.numel())
        ):
            return proxy
        root_meta = _tensor_meta(self.nodes[root])
        base = Moving(
            tuple(int(s) for s in root_meta.shape), root_meta.dtype, frame, [W]
        ).normalised()
        proxy.source = (
            lambda d, P=P, shape=shape: d[0].reshape(-1)[P].reshape(shape),
            [base],
            None,
        )
        return proxy

    def _apply_rule(
        self, node: Any, rule: Any, slots: list[str], combo: list[tuple[str, torch.Tensor]], j: int
    ) -> torch.Tensor | None:
        """The map ``M`` with ``op(u[m], c) = op(u, c)[M]`` for every ``u``, by the operator's rule."""
        frame = self.single[j]
        position = [0]

        def fill(v: Any) -> Any:
            if hasattr(v, "name") and hasattr(v, "op"):
                value = self.values.get(v.name)
                if isinstance(value, Constant):
                    return value
                i = position[0]
                position[0] += 1
                return self._proxy(slots[i], combo[i][0], combo[i][1], frame)
            if isinstance(v, list):
                return [fill(x) for x in v]
            if isinstance(v, tuple):
                return tuple(fill(x) for x in v)
            return v

        args = fill(node.args)
        kwargs = {k: fill(v) for k, v in node.kwargs.items()}  # slots were numbered in this order
        call = OpCall(
            node.name,
            node.target,
            Args(node.target, tuple(args), dict(kwargs)),
            tuple(args),
            dict(kwargs),
            node.meta.get("val"),
        )
        try:
            out = rule(call)
        except Exception:  # Breaks, Unverifiable or a rule's own limits: no relation
            return None
        if call.args.unread() or not isinstance(out, Moving) or out.shape != _shape(node):
            return None
        if out.frame is not frame and not out.invariant:
            return None
        return out.maps()[0]

    # ------------------------------------------------------------------------- closing

    def _sum_terms(
        self, node: Any, flatten: bool = True
    ) -> tuple[list[str] | None, list[Any], list[Any]]:
        """The terms of the ``add`` tree ending at ``node``: input-dependent terms (node names),
        constant terms, and the exact keys of the constant and scalar terms.

        ``flatten=False`` keeps the two operands of ``node`` as they are (a partial sum
        is then one term); otherwise partial sums of the same shape are opened.
        """
        shape = _shape(node)
        terms: list[str] = []
        fixed: list[Any] = []
        keys: list[Any] = []
        todo = [node]
        while todo:
            n = todo.pop()
            if n.kwargs or len(n.args) != 2:
                return None, [], []
            for a in n.args[:2]:
                if hasattr(a, "name") and hasattr(a, "op"):
                    value = self.values.get(a.name)
                    if isinstance(value, Constant):
                        fixed.append(value)
                        keys.append(self.digests.setdefault(a.name, _digest(value)))
                    elif flatten and _is_same_sum(a, node):
                        todo.append(a)
                    elif _tensor_meta(a) is not None and _shape(a) == shape:
                        terms.append(a.name)
                    else:
                        return None, [], []
                elif isinstance(a, int | float) and not isinstance(a, bool):
                    keys.append(_literal(a))  # a scalar term is the same everywhere
                else:
                    return None, [], []
            if len(terms) > MAX_TERMS:
                return None, [], []
        return terms, fixed, sorted(keys, key=repr)

    def _sum_relations(self, node: Any) -> None:
        """Relations of a sum to sums (itself included) whose terms its terms move onto."""
        if not _is_same_sum(node, node):
            return
        rel = self.relations[node.name]
        shape = _shape(node)
        for flatten in (True, False):
            terms, fixed, keys = self._sum_terms(node, flatten)
            if not terms:
                continue
            for other in self.sums:
                # the same operator: a maximum relates to maxima, a sum to sums
                if (
                    other not in self.family
                    or self.nodes[other].target is not node.target
                    or _shape(self.nodes[other]) != shape
                ):
                    continue
                o_terms, _, o_keys = self._sum_terms(self.nodes[other], flatten)
                if o_terms is None or len(o_terms) != len(terms) or o_keys != keys:
                    continue
                for j in range(len(self.frame.generators)):
                    M = self._common_map(terms, o_terms, fixed, shape, j)
                    if M is not None:
                        root, P = self.family[other]
                        self._add(rel[j], root, P[M])

    def _common_map(
        self, terms: list[str], targets: list[str], fixed: list[Any], shape: tuple[int, ...], j: int
    ) -> torch.Tensor | None:
        """One map ``M`` with ``terms(g_j·x)`` matched one to one onto ``targets(x)[M]``."""
        allowed = set(targets)
        partners = [self._partners(t, j, shape, allowed) for t in terms]
        if any(not p for p in partners):
            return None
        for _, M in partners[0]:
            edges = [
                [
                    k
                    for k, t in enumerate(targets)
                    if any(z == t and torch.equal(m, M) for z, m in partners[i])
                ]
                for i in range(len(terms))
            ]
            if _match(len(terms), edges) is not None and all(
                _fixed_invariant(c, M, shape) for c in fixed
            ):
                return M
        return None

    def _close_sum(self, node: Any) -> Moving | None:
        shape = _shape(node)
        for flatten in (True, False):
            terms, fixed, _ = self._sum_terms(node, flatten)
            if not terms:
                continue
            maps: list[torch.Tensor] = []
            for j in range(len(self.frame.generators)):
                M = self._common_map(terms, terms, fixed, shape, j)
                if M is None:
                    break
                maps.append(M)
            else:
                meta = node.meta["val"]
                return Moving(shape, meta.dtype, self.frame, maps).normalised()
        return None

    def _close_stack(self, node: Any, pieces: list[str]) -> Moving | None:
        piece_shape = _shape(self.nodes[pieces[0]])
        n = _numel(piece_shape)
        count = len(pieces)
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        codes = [torch.arange(n).reshape(piece_shape) + k * n for k in range(count)]
        code = node.target(codes, dim).reshape(-1)
        if code.numel() != n * count or code.numel() != _numel(_shape(node)):
            return None
        where = torch.empty(n * count, dtype=torch.long)
        where[code] = torch.arange(code.numel())
        slot, entry = code // n, code % n
        allowed = set(pieces)
        maps: list[torch.Tensor] = []
        for j in range(len(self.frame.generators)):
            partners = [self._partners(p, j, piece_shape, allowed) for p in pieces]
            edges = [
                [k for k, p in enumerate(pieces) if any(z == p for z, _ in partners[i])]
                for i in range(count)
            ]
            sigma = _match(count, edges)
            if sigma is None:
                return None
            within = torch.stack(
                [next(m for z, m in partners[i] if z == pieces[sigma[i]]) for i in range(count)]
            )
            target = torch.tensor(sigma, dtype=torch.long)[slot] * n + within[slot, entry]
            maps.append(where[target])
        meta = node.meta["val"]
        return Moving(_shape(node), meta.dtype, self.frame, maps).normalised()


_TORCH_DIRECTORY = os.path.dirname(torch.__file__)
#: Operators whose result is not a function of their operands' values: uninitialised
#: memory, or memory read through strides.
_NOT_FUNCTIONS = ("empty", "as_strided", "resize", "set_", "_reshape_alias", "storage")


def _native_aten(target: Any) -> bool:
    """An operator of ATen itself: its schema registered by PyTorch's build, and no kernel
    registered from Python code outside PyTorch (a user's ``Library("aten", ...)``)."""
    name = target._schema.name
    if not name.startswith("aten::") or any(part in name for part in _NOT_FUNCTIONS):
        return False
    return replaced_kernel(target) is None


def replaced_kernel(target: Any) -> str | None:
    """Where an ``aten`` operator's schema or a kernel of it was registered from Python
    outside PyTorch (a user's ``torch.library.Library("aten", ...)``), or ``None``."""
    name = target._schema.name
    overload = target._overloadname
    qualified = name if overload in ("", "default") else f"{name}.{overload}"
    try:
        table = torch._C._dispatch_dump(qualified)
    except RuntimeError:
        return "an unknown operator"
    for line in table.splitlines():
        if "registered at " not in line:
            continue
        where = line.split("registered at ", 1)[1].split(" ::", 1)[0].strip()
        if line.startswith("debug:") and "RegisterSchema" not in where:
            return where  # the schema itself was defined elsewhere
        source = where.rsplit(":", 1)[0]
        if source.startswith("<") or (
            source.endswith(".py") and not source.startswith(_TORCH_DIRECTORY)
        ):
            return where
    return None


def judge_operator(target: Any) -> tuple[bool, bool]:
    """``(congruent, equal_results)`` for an operator with a schema.

    ``congruent``: congruence may relate two of its calls — an ATen operator that is
    deterministic or random with a rule, or another operator with a rule (never a user
    leaf: its runtime behaviour is checked elsewhere). ``equal_results``: two calls on
    equal operands give equal results, with no rule — only ATen's own operators (see
    ``_native_aten``) that draw no random numbers.
    """
    name = target._schema.name
    native = _native_aten(target)
    random = torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())
    if not native:  # a user's operator may keep state
        congruent = rule_for(target) is not None and name != "groupattn_check::leaf"
    else:
        congruent = not random or (name in RANDOM_OPS_WITH_RULES and rule_for(target) is not None)
    return congruent, native and not random


def equal_operands_give_equal_results(target: Any) -> bool:
    """Whether two calls of ``target`` on equal operands give equal results (see
    ``judge_operator``)."""
    return judge_operator(target)[1]


def _combinations(
    slots: list[str], options: list[list[tuple[str, torch.Tensor]]]
) -> list[tuple[tuple[str, torch.Tensor], ...]]:
    """Partner choices for the slots, at most ``MAX_COMBINATIONS``: first those that give
    one operand appearing in several slots (``q = k = v``) one partner, then the rest."""
    distinct = list(dict.fromkeys(slots))
    first: list[tuple[tuple[str, torch.Tensor], ...]] = []
    for choice in itertools.islice(
        itertools.product(*[options[slots.index(a)] for a in distinct]), MAX_COMBINATIONS
    ):
        pick = dict(zip(distinct, choice))
        first.append(tuple(pick[a] for a in slots))
    if len(distinct) == len(slots):
        return first
    rest = itertools.islice(itertools.product(*options), MAX_COMBINATIONS)
    seen = {tuple(id(m) for _, m in c) for c in first}
    return (
        first
        + [c for c in rest if tuple(id(m) for _, m in c) not in seen][
            : max(0, MAX_COMBINATIONS - len(first))
        ]
    )


def _is_same_sum(a: Any, node: Any) -> bool:
    """Whether ``a`` is a symmetric operation (``_SYMMETRIC``) of the same operator and
    shape as ``node`` (a partial sum, product, … of ``node``'s tree)."""
    return (
        getattr(a, "op", None) == "call_function"
        and hasattr(a.target, "_schema")
        and _exact_name(a.target) in _SYMMETRIC
        and a.target is node.target
        and not a.kwargs
        and len(a.args) == 2
        and _tensor_meta(a) is not None
        and _shape(a) == _shape(node)
    )


def _fixed_invariant(c: Constant, M: torch.Tensor, shape: tuple[int, ...]) -> bool:
    """A constant term of a sum: unchanged by the sum's map (a scalar always is)."""
    if not isinstance(c.first, torch.Tensor) or c.first.numel() == 1:
        return True
    try:
        third = c.third.expand(shape) if c.third is not None else None
        full = Constant(c.first.expand(shape), c.second.expand(shape), third, c.exact)
    except RuntimeError:  # not broadcastable to the sum's shape
        return False
    classes = constant_classes(full)
    return bool(torch.equal(classes[M], classes))


def _flat_nodes(v: Any) -> list[Any]:
    if hasattr(v, "name") and hasattr(v, "op"):
        return [v]
    if isinstance(v, list | tuple):
        return [x for item in v for x in _flat_nodes(item)]
    if isinstance(v, dict):
        return [x for item in v.values() for x in _flat_nodes(item)]
    return []


def _ancestors(graph: Any, name: str) -> set[str]:
    if name not in graph:
        return set()
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        for p in graph.predecessors(n):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen
