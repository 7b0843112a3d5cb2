"""Schreier–Sims: stabiliser chains of permutation groups, and words in the generators.

A permutation is a tuple ``p`` of the points ``0 … n−1``; it sends ``i`` to ``p[i]``.
Products follow the library's convention: ``mul(a, b)[i] = a[b[i]]`` ("``a`` after
``b``").

A *stabiliser chain* of ``G`` for a base ``(b₀, …, b_{m−1})`` is the sequence
``G = G⁽⁰⁾ ≥ G⁽¹⁾ ≥ … ≥ G⁽ᵐ⁾ = 1`` with ``G⁽ⁱ⁺¹⁾`` the stabiliser of ``bᵢ`` in ``G⁽ⁱ⁾``.
Level ``i`` keeps generators of ``G⁽ⁱ⁾`` (the strong generators fixing
``b₀ … b_{i−1}``), the orbit ``Δᵢ = bᵢ^{G⁽ⁱ⁾}`` and, for every ``j ∈ Δᵢ``, a transversal
element ``uᵢ(j) ∈ G⁽ⁱ⁾`` with ``uᵢ(j)[bᵢ] = j``, found by a breadth-first search over the
level's generators (its Schreier tree; the transversal elements are stored explicitly
with their inverses, which is cheap at the degrees used here). Every ``g ∈ G`` is then
uniquely ``g = u₀(j₀)·u₁(j₁)·…·u_{m−1}(j_{m−1})`` ("sifting"), so
``|G| = ∏ |Δᵢ|``, membership is a sift, and a uniformly random element is a product of
uniformly random transversal elements.

Nothing here lists the group's elements.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

Permutation = tuple[int, ...]


def mul(a: Permutation, b: Permutation) -> Permutation:
    """``a · b`` ("``a`` after ``b``"): ``mul(a, b)[i] = a[b[i]]``."""
    return tuple(map(a.__getitem__, b))


def inv(a: Permutation) -> Permutation:
    """The inverse permutation."""
    out = [0] * len(a)
    for i, v in enumerate(a):
        out[v] = i
    return tuple(out)


def perm_order(a: Permutation) -> int:
    """The order of ``a`` (the lcm of its cycle lengths)."""
    seen = [False] * len(a)
    order = 1
    for start in range(len(a)):
        if seen[start]:
            continue
        length, i = 0, start
        while not seen[i]:
            seen[i] = True
            i = a[i]
            length += 1
        order = order * length // math.gcd(order, length)
    return order


def first_moved(a: Permutation) -> int:
    """The smallest point ``a`` moves (``a`` must not be the identity)."""
    for i, v in enumerate(a):
        if v != i:
            return i
    raise ValueError("the identity moves no point")  # pragma: no cover - guarded by callers


@dataclass
class _Level:
    """One level of a stabiliser chain: base point, generators, orbit with transversal."""

    point: int
    gens: list[Permutation] = field(default_factory=list)
    trans: dict[int, Permutation] = field(default_factory=dict)
    trans_inv: dict[int, Permutation] = field(default_factory=dict)

    def start(self, identity: Permutation) -> None:
        self.trans = {self.point: identity}
        self.trans_inv = {self.point: identity}
        self._grow(list(self.trans))

    def add_generator(self, g: Permutation) -> None:
        """Add ``g`` and extend the orbit (existing transversal elements are kept)."""
        self.gens.append(g)
        new = []
        for x in list(self.trans):
            y = g[x]
            if y not in self.trans:
                u = mul(g, self.trans[x])
                self.trans[y] = u
                self.trans_inv[y] = inv(u)
                new.append(y)
        self._grow(new)

    def _grow(self, frontier: list[int]) -> None:
        while frontier:
            nxt = []
            for x in frontier:
                ux = self.trans[x]
                for g in self.gens:
                    y = g[x]
                    if y not in self.trans:
                        u = mul(g, ux)
                        self.trans[y] = u
                        self.trans_inv[y] = inv(u)
                        nxt.append(y)
            frontier = nxt


class StabilizerChain:
    """A base and strong generating set of a permutation group, with transversals.

    Build one with ``schreier_sims`` (deterministic, from any generators),
    ``from_strong_generators`` (when a base and strong generating set are already
    known, e.g. for S_n or from a graph-automorphism search) or ``rebase`` (a new
    base prefix for a group of known order, by random Schreier–Sims with that order as
    the stopping test).
    """

    def __init__(self, degree: int, levels: list[_Level]) -> None:
        self.degree = degree
        self.levels = levels
        self.identity: Permutation = tuple(range(degree))

    # ------------------------------------------------------------------ construction
    @classmethod
    def schreier_sims(
        cls, generators: Sequence[Permutation], degree: int, base_prefix: Sequence[int] = ()
    ) -> StabilizerChain:
        """Deterministic Schreier–Sims from ``generators`` (``base_prefix`` starts the base).

        Every Schreier generator ``uᵢ(s(j))⁻¹ · s · uᵢ(j)`` of every level is sifted
        through the deeper levels; a non-trivial residue becomes a new strong generator
        (and a new base point when it fixes the whole base). Pairs ``(j, s)`` already
        checked are not checked again: deeper levels only grow, so a residue once
        trivial stays trivial.
        """
        ident = tuple(range(degree))
        gens = list(dict.fromkeys(g for g in generators if g != ident))
        base = list(base_prefix)
        for g in gens:
            if all(g[b] == b for b in base):
                base.append(first_moved(g))
        chain = cls(degree, [])
        for i, b in enumerate(base):
            level = _Level(b, [g for g in gens if all(g[c] == c for c in base[:i])])
            level.start(ident)
            chain.levels.append(level)
        checked: list[set[tuple[int, int]]] = [set() for _ in chain.levels]
        i = len(chain.levels) - 1
        while i >= 0:
            level = chain.levels[i]
            added_at = None
            for j in list(level.trans):
                uj = level.trans[j]
                for s_index, s in enumerate(level.gens):
                    if (j, s_index) in checked[i]:
                        continue
                    checked[i].add((j, s_index))
                    k = s[j]
                    su = mul(s, uj)
                    if su == level.trans[k]:
                        continue
                    residue, depth = chain.sift(mul(level.trans_inv[k], su), i + 1)
                    if residue != ident:
                        if depth == len(chain.levels):
                            new = _Level(first_moved(residue))
                            new.start(ident)
                            chain.levels.append(new)
                            checked.append(set())
                        for t in range(i + 1, depth + 1):
                            chain.levels[t].add_generator(residue)
                        added_at = depth
                        break
                if added_at is not None:
                    break
            i = added_at if added_at is not None else i - 1
        return chain

    @classmethod
    def from_strong_generators(
        cls, degree: int, base: Sequence[int], strong: Sequence[Permutation]
    ) -> StabilizerChain:
        """The chain of a known base and strong generating set (trusted, not verified)."""
        ident = tuple(range(degree))
        levels = []
        for i, b in enumerate(base):
            level = _Level(
                b, [s for s in strong if s != ident and all(s[c] == c for c in base[:i])]
            )
            level.start(ident)
            levels.append(level)
        return cls(degree, levels)

    def rebase(self, base_prefix: Sequence[int], seed: int = 0) -> StabilizerChain:
        """A chain of the same group whose base starts with ``base_prefix``.

        Random Schreier–Sims: uniformly random elements (from this chain) are sifted
        through the new chain until the product of its orbit lengths reaches this
        group's order. That product never exceeds the order of the group the new strong
        generators generate, which is a subgroup of this one; so reaching the order
        proves the new chain complete (the randomness affects only the running time).
        """
        target = self.order()
        rng = random.Random(seed)
        new = StabilizerChain(self.degree, [])
        for b in base_prefix:
            level = _Level(b)
            level.start(self.identity)
            new.levels.append(level)
        candidates = [g for level in self.levels for g in level.gens]
        while new.order() < target:
            g = candidates.pop(0) if candidates else self.random(rng)
            residue, depth = new.sift(g)
            if residue != self.identity:
                new._add_strong(residue, depth)
        return new

    def _add_strong(self, residue: Permutation, depth: int) -> None:
        if depth == len(self.levels):
            level = _Level(first_moved(residue))
            level.start(self.identity)
            self.levels.append(level)
        for t in range(depth + 1):
            self.levels[t].add_generator(residue)

    # ------------------------------------------------------------------ queries
    @property
    def base(self) -> list[int]:
        """The base points ``b₀ … b_{m−1}``."""
        return [level.point for level in self.levels]

    def strong_generators(self) -> list[Permutation]:
        """The strong generating set (every level's generators, without repeats)."""
        return list(dict.fromkeys(g for level in self.levels for g in level.gens))

    def order(self) -> int:
        """``∏ |Δᵢ|``."""
        out = 1
        for level in self.levels:
            out *= len(level.trans)
        return out

    def sift(self, g: Permutation, start: int = 0) -> tuple[Permutation, int]:
        """Strip ``g`` through levels ``start …``: the residue and the level it stopped at.

        The level is ``len(levels)`` when every level was passed; then ``g`` is in the
        group exactly when the residue is the identity.
        """
        for t in range(start, len(self.levels)):
            level = self.levels[t]
            j = g[level.point]
            u_inv = level.trans_inv.get(j)
            if u_inv is None:
                return g, t
            g = mul(u_inv, g)
        return g, len(self.levels)

    def contains(self, g: Permutation) -> bool:
        """Whether ``g`` is in the group."""
        residue, _ = self.sift(g)
        return residue == self.identity

    def random(self, rng: random.Random) -> Permutation:
        """A uniformly random element: a product of uniform transversal elements."""
        g = self.identity
        for level in reversed(self.levels):
            points = list(level.trans)
            g = mul(level.trans[points[rng.randrange(len(points))]], g)
        return g

    def orbit(self, point: int, generators: Sequence[Permutation]) -> list[int]:
        """The orbit of ``point`` under ``generators`` (breadth-first order)."""
        seen = {point: None}
        frontier = [point]
        while frontier:
            nxt = []
            for x in frontier:
                for g in generators:
                    y = g[x]
                    if y not in seen:
                        seen[y] = None
                        nxt.append(y)
            frontier = nxt
        return list(seen)


# ---------------------------------------------------------------------- words
Runs = tuple[tuple[int, int], ...]
"""A word as runs ``((k, c), …)``: generator ``k`` repeated ``c`` times, left to right."""


@dataclass
class _Entry:
    perm: Permutation
    perm_inv: Permutation
    runs: Runs
    length: int


class WordTable:
    """Words in the original generators for a full set of transversal elements.

    For every level ``i`` of a complete ``StabilizerChain`` and every orbit point
    ``j`` it holds an element ``tᵢ(j) ∈ G⁽ⁱ⁾`` with ``tᵢ(j)[bᵢ] = j`` together with a
    word for it in the *original* generators (never their inverses: ``s⁻¹`` is written
    ``s^{ord(s)−1}``, and adjacent runs of one generator are reduced modulo its order).
    Then ``g = t₀(j₀)·t₁(j₁)·…`` (sifting) gives a word for any ``g``.

    The table is filled by a Schreier–Sims closure run *on the words*, shortest
    products first. ``S`` is a strong generating set with words: the original
    generators, and every *residue* — an element stored after being stripped by a
    table entry. ``Sᵢ`` are those fixing ``b₀ … b_{i−1}``. For every level ``i``, every
    ``x ∈ Sᵢ`` and every level-``i`` entry ``u``, the product ``x · u`` is sifted
    (a heap keyed by word length decides the order, so short words come first): it
    either lands in an empty slot at level ``i`` (an orbit step, stored with the word
    ``word(x) + word(u)``), or is stripped — its residue ``t⁻¹ · x · u`` is a Schreier
    generator and is stored, with its word, in the first empty slot it reaches (and
    joins ``S``), or it strips to the identity. Pairs that cannot fill anything (their
    slot is taken and every deeper level is full) are skipped.

    Every stored element is correct by construction (its word evaluates to it), so
    the table is complete exactly when every slot of the known chain is filled, which
    is when the closure stops. It cannot stop earlier: every entry lies in
    ``⟨Sᵢ⟩``, so once every product has been sifted the entries of levels ``≥ i``
    multiply out to ``⟨Sᵢ⟩`` (Schreier–Sims' criterion, by induction from the deepest
    level), which for ``i = 0`` contains the generators, i.e. is the whole group.
    Building the table is deterministic.
    """

    def __init__(self, chain: StabilizerChain, generators: Sequence[Permutation]) -> None:
        self.base = chain.base
        self.identity = chain.identity
        self.orders = [perm_order(g) for g in generators]
        m = len(self.base)
        ident = self.identity
        self.entries: list[dict[int, _Entry]] = [
            {b: _Entry(ident, ident, (), 0)} for b in self.base
        ]
        self._missing_at = [len(level.trans) - 1 for level in chain.levels]
        self._missing = sum(self._missing_at)
        self._heap: list[tuple[int, int, _Entry, _Entry, int]] = []
        self._counter = 0
        self.sifts = 0
        #: strong generators with words, each with the deepest level it lies in
        self._strong: list[tuple[_Entry, int]] = []
        originals = [
            _Entry(g, inv(g), self._reduce(((k, 1),)), 1) for k, g in enumerate(generators)
        ]
        natural = [
            next((i for i, b in enumerate(self.base) if g.perm[b] != b), m) for g in originals
        ]
        self._strong = [(g, lvl) for g, lvl in zip(originals, natural) if lvl < m]
        for g, lvl in zip(originals, natural):
            if lvl < m:
                self._insert(g.perm, g.runs, lvl)
        while self._missing > 0:
            if not self._heap:  # pragma: no cover - impossible (see the class docstring)
                raise RuntimeError("word table: closure ended before the table was full")
            _, _, x, u, level = heapq.heappop(self._heap)
            # x and u lie in G⁽ˡᵉᵛᵉˡ⁾: they fix the base points before it
            deeper_full = not any(self._missing_at[level + 1 :])
            if deeper_full and (
                self._missing_at[level] == 0
                or x.perm[u.perm[self.base[level]]] in self.entries[level]
            ):
                continue  # nothing it could fill
            self.sifts += 1
            self._insert(mul(x.perm, u.perm), x.runs + u.runs, level)
        self._heap.clear()

    # ------------------------------------------------------------------ words as runs
    def _reduce(self, runs: Sequence[tuple[int, int]]) -> Runs:
        stack: list[tuple[int, int]] = []
        for k, c in runs:
            c %= self.orders[k]
            if not c:
                continue
            if stack and stack[-1][0] == k:
                c = (stack.pop()[1] + c) % self.orders[k]
                if not c:
                    continue
            stack.append((k, c))
        return tuple(stack)

    def _inverse(self, runs: Runs) -> Runs:
        return tuple((k, self.orders[k] - c) for k, c in reversed(runs))

    # ------------------------------------------------------------------ filling
    def _push(self, x: _Entry, u: _Entry, level: int) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (x.length + u.length, self._counter, x, u, level))

    def _insert(self, g: Permutation, runs: Runs, level: int) -> None:
        """Sift ``g`` (whose word is ``runs``, and which fixes the base points before
        ``level``) from ``level``; store it in the first empty slot it reaches."""
        passed: list[_Entry] = []
        for i in range(level, len(self.base)):
            j = g[self.base[i]]
            entry = self.entries[i].get(j)
            if entry is None:
                word: Runs = runs
                for e in passed:
                    word = self._inverse(e.runs) + word
                word = self._reduce(word)
                new = _Entry(g, inv(g), word, sum(c for _, c in word))
                self.entries[i][j] = new
                self._missing -= 1
                self._missing_at[i] -= 1
                # an orbit step (stored where it started, unstripped) is a product of
                # elements of ⟨Sᵢ⟩; anything else is a new strong generator
                residue = bool(passed) or i != level
                if residue:
                    self._strong.append((new, i))
                self._schedule(new, i, residue)
                return
            if entry.length:
                passed.append(entry)
                g = mul(entry.perm_inv, g)
        # fell through: g is the identity (the chain is complete)

    def _schedule(self, new: _Entry, level: int, strong: bool) -> None:
        # new as u at its level, with every strong generator usable there
        for x, lvl in self._strong:
            if lvl >= level:
                self._push(x, new, level)
        # a new strong generator (it lies in G⁽ᵗ⁾ for t ≤ level) with every entry u there
        if strong:
            for t in range(level + 1):
                for u in self.entries[t].values():
                    if u.length and u is not new:
                        self._push(new, u, t)

    # ------------------------------------------------------------------ queries
    def word(self, g: Permutation) -> list[int]:
        """Generator indices ``w`` with ``g = gens[w[0]] · gens[w[1]] · …`` (``g`` in the group)."""
        pieces: list[tuple[int, int]] = []
        for i, b in enumerate(self.base):
            entry = self.entries[i][g[b]]
            pieces.extend(entry.runs)
            g = mul(entry.perm_inv, g)
        out: list[int] = []
        for k, c in self._reduce(pieces):
            out.extend([k] * c)
        return out

    def max_length(self) -> int:
        """The longest stored transversal word."""
        return max((e.length for level in self.entries for e in level.values()), default=0)
