"""Automorphism groups of graphs by individualisation–refinement, without listing them.

The search finds a base and a strong generating set directly (the approach of McKay's
nauty and of Butler's stabiliser-chain backtracking, written here in its simplest form):

1. **Refinement.** A colouring of the vertices is refined to the coarsest *equitable*
   one (colour refinement, 1-dimensional Weisfeiler–Leman): a vertex's new colour is
   its old colour together with the multiset of its (out- and in-) neighbours'
   colours. New colours are numbered by sorting these signatures, so the numbering
   depends only on the graph's structure, never on vertex labels: an automorphism
   that maps one colouring onto another maps the refined colourings onto each other
   and produces the same sequence of signatures (the *trace*).
2. **The first path.** From the refined root colouring, repeatedly *individualise* the
   smallest vertex of the first non-singleton cell (give it a colour of its own) and
   refine, until every cell is a singleton. The individualised vertices
   ``b₀, b₁, …, b_{m−1}`` form a base: an automorphism fixing them fixes every vertex.
3. **Transversals, deepest level first.** ``G⁽ⁱ⁾`` is the stabiliser of
   ``b₀ … b_{i−1}``; the orbit of ``bᵢ`` under it lies in ``bᵢ``'s cell ``Cᵢ`` at level
   ``i``. For each ``j ∈ Cᵢ`` not already in ``bᵢ``'s orbit under the generators found
   so far (all of which fix ``b₀ … b_{i−1}``), and not already known to be unreachable,
   a backtracking search looks for an automorphism fixing ``b₀ … b_{i−1}`` and mapping
   ``bᵢ ↦ j``: individualise ``j`` instead of ``bᵢ`` and refine; below that, follow
   the first path on one side and try every vertex of the matching cell on the other,
   pruning as soon as the traces differ. A candidate mapping is always checked edge by
   edge before it is accepted. Before branching, the cheap candidate "singleton cells
   by colour, every other vertex fixed" is tried, which finds the automorphisms of
   graphs made of interchangeable parts at once.

Each accepted automorphism strictly enlarges an orbit, so the generating set has at
most ``log₂ |Aut|`` elements, and ``|Aut| = ∏ |orbit of bᵢ under G⁽ⁱ⁾|``. The search is
exhaustive where it has to be (a point reported unreachable really is), so the result
is exact. Its cost is a few colour refinements per orbit representative; graphs on
which refinement is weak (strongly regular graphs) can make the backtracking slow.
"""

from __future__ import annotations

from collections.abc import Sequence

Permutation = tuple[int, ...]
Signature = tuple[object, ...]
Trace = list[tuple[tuple[Signature, ...], tuple[int, ...]]]


class AutomorphismSearch:
    """Base, strong generators and order of the automorphism group of a finite graph.

    Parameters
    ----------
    out_adj
        ``out_adj[u]``: dict ``{v: multiplicity}`` of the edges ``u → v`` (both
        directions listed for undirected graphs).
    in_adj
        The reverse adjacency (``None`` for undirected graphs).
    """

    def __init__(
        self, out_adj: Sequence[dict[int, int]], in_adj: Sequence[dict[int, int]] | None
    ) -> None:
        self.n = len(out_adj)
        self.out_adj = out_adj
        self.in_adj = in_adj
        self.out_lists = [sorted(v for v, c in nb.items() for _ in range(c)) for nb in out_adj]
        self.in_lists = (
            [sorted(v for v, c in nb.items() for _ in range(c)) for nb in in_adj]
            if in_adj is not None
            else None
        )
        self.generators: list[Permutation] = []
        self.base: list[int] = []
        self.orbit_sizes: list[int] = []
        self._run()

    # ------------------------------------------------------------------ refinement
    def _refine(self, colors: list[int]) -> tuple[list[int], Trace]:
        """The coarsest equitable refinement, canonically numbered, and its trace."""
        trace: Trace = []
        k = len(set(colors))
        outs, ins = self.out_lists, self.in_lists
        while True:
            sigs: list[Signature]
            if ins is None:
                sigs = [
                    (colors[v], tuple(sorted([colors[w] for w in outs[v]]))) for v in range(self.n)
                ]
            else:
                sigs = [
                    (
                        colors[v],
                        tuple(sorted([colors[w] for w in outs[v]])),
                        tuple(sorted([colors[w] for w in ins[v]])),
                    )
                    for v in range(self.n)
                ]
            distinct = sorted(set(sigs))
            rank = {s: r for r, s in enumerate(distinct)}
            new = [rank[s] for s in sigs]
            counts = [0] * len(distinct)
            for c in new:
                counts[c] += 1
            trace.append((tuple(distinct), tuple(counts)))
            if len(distinct) == k:
                return new, trace
            colors, k = new, len(distinct)

    @staticmethod
    def _individualise(colors: list[int], v: int) -> list[int]:
        out = [2 * c for c in colors]
        out[v] += 1
        return out

    @staticmethod
    def _target_cell(colors: list[int]) -> int | None:
        """The smallest colour whose cell has more than one vertex (``None``: discrete)."""
        counts: dict[int, int] = {}
        for c in colors:
            counts[c] = counts.get(c, 0) + 1
        multi = [c for c, k in counts.items() if k > 1]
        return min(multi) if multi else None

    # ------------------------------------------------------------------ checks
    def _is_automorphism(self, perm: Sequence[int]) -> bool:
        out = self.out_adj
        for u in range(self.n):
            image = out[perm[u]]
            nb = out[u]
            if len(image) != len(nb):
                return False
            for v, c in nb.items():
                if image.get(perm[v]) != c:
                    return False
        return True

    def _leaf_map(self, left: list[int], right: list[int]) -> Permutation | None:
        """The map sending each left vertex to the right vertex of the same (singleton) colour."""
        where = {c: v for v, c in enumerate(right)}
        perm = tuple(where[c] for c in left)
        return perm if self._is_automorphism(perm) else None

    def _cheap_map(self, left: list[int], right: list[int]) -> Permutation | None:
        """Singleton cells matched by colour, every other vertex fixed — if that is an automorphism."""
        counts: dict[int, int] = {}
        for c in left:
            counts[c] = counts.get(c, 0) + 1
        where = {c: v for v, c in enumerate(right) if counts.get(c) == 1}
        perm = []
        for v, c in enumerate(left):
            if counts[c] == 1:
                w = where.get(c)
                if w is None:
                    return None
                perm.append(w)
            else:
                if right[v] != c:
                    return None
                perm.append(v)
        if sorted(perm) != list(range(self.n)):
            return None
        p = tuple(perm)
        return p if self._is_automorphism(p) else None

    # ------------------------------------------------------------------ the search
    def _run(self) -> None:
        root, _ = self._refine([0] * self.n)
        # the first path: colourings before each individualisation, and the traces after
        self._path: list[list[int]] = [root]
        self._traces: list[Trace] = []
        colors = root
        while True:
            cell = self._target_cell(colors)
            if cell is None:
                break
            v = min(u for u, c in enumerate(colors) if c == cell)
            self.base.append(v)
            colors, trace = self._refine(self._individualise(colors, v))
            self._traces.append(trace)
            self._path.append(colors)
        m = len(self.base)
        sizes = [0] * m
        # orbits of the generators found so far: all were found at levels ≥ i, so all
        # fix b₀ … b_{i−1} and generate a subgroup of G⁽ⁱ⁾ (levels are done deepest first)
        orbits = _UnionFind(self.n)
        for i in reversed(range(m)):
            colors_i = self._path[i]
            b = self.base[i]
            members = [u for u, c in enumerate(colors_i) if c == colors_i[b]]
            # points known unreachable from b (and so is everything in their orbits)
            failed: list[int] = []
            for j in members:
                rep = orbits.find(j)
                if rep == orbits.find(b) or any(rep == orbits.find(f) for f in failed):
                    continue
                found = self._search(i, j)
                if found is None:
                    failed.append(j)
                else:
                    self.generators.append(found)
                    orbits.add_permutation(found)
            root_b = orbits.find(b)
            sizes[i] = sum(1 for u in range(self.n) if orbits.find(u) == root_b)
        self.orbit_sizes = sizes

    def _search(self, i: int, j: int) -> Permutation | None:
        """An automorphism fixing ``b₀ … b_{i−1}`` and mapping ``bᵢ ↦ j``, or ``None``."""
        right, trace = self._refine(self._individualise(self._path[i], j))
        if trace != self._traces[i]:
            return None
        return self._descend(i + 1, right)

    def _descend(self, k: int, right: list[int]) -> Permutation | None:
        left = self._path[k]
        if k == len(self.base):
            return self._leaf_map(left, right)
        cheap = self._cheap_map(left, right)
        if cheap is not None:
            return cheap
        color = left[self.base[k]]
        for w in [u for u, c in enumerate(right) if c == color]:
            nxt, trace = self._refine(self._individualise(right, w))
            if trace != self._traces[k]:
                continue
            found = self._descend(k + 1, nxt)
            if found is not None:
                return found
        return None

    def order(self) -> int:
        """``|Aut| = ∏ orbit sizes``."""
        out = 1
        for s in self.orbit_sizes:
            out *= s
        return out


class _UnionFind:
    """Orbits of a growing set of permutations (union–find with path halving)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def add_permutation(self, perm: Sequence[int]) -> None:
        for i, j in enumerate(perm):
            a, b = self.find(i), self.find(j)
            if a != b:
                self.parent[max(a, b)] = min(a, b)
