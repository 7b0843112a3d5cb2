"""Orbital attention over any G-set: field types, orbital biases, attention, blocks, pooling.

Every example structure (sets under S_n, the Petersen and 3×3 grid graphs, hexagonal
grids under C6/D6, periodic sequences, C4 × C2 on a cylinder, a hand-written Klein
four-group, value streams carrying a representation) is checked over every element of
its group — generators and 200 sampled elements for S_10 and S_50 — twice: with
``assert_equivariant`` and with an index-permutation oracle written here (plain
indexing in float64). The free per-pair bias must break each of them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import networkx as nx
import pytest
import torch
from custom_groups import KleinFour
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from groupattn.actions import (
    DirectSumRepresentation,
    GridField,
    GSet,
    GSetField,
    InvariantField,
    MatrixRepresentation,
    PermutationRepresentation,
    RegularRepresentation,
    Representation,
    SetField,
    TokenField,
    TrivialRepresentation,
)
from groupattn.attention import GlobalSelfAttention, MeanPooling, OrbitalAttention
from groupattn.contracts import Contract, Status
from groupattn.groups import (
    CyclicGroup,
    DirectProduct,
    Group,
    GroupElement,
    GroupError,
    PermutationGroup,
    SymmetricGroup,
    TorusTranslations,
    graph_automorphism_group,
)
from groupattn.nn import EquivariantModule, TransformerBlock
from groupattn.positional import (
    CirculantRelativeBias,
    ContinuousOrbitalBias,
    OrbitalBias,
    PairTableBias,
    PairwiseBias,
    labels_contract,
)
from groupattn.testing import (
    assert_equivariant,
    default_tolerance,
    equivariance_error,
    relative_error,
)

DIM, HEADS = 8, 2


# ----------------------------------------------------------------------------- structures
def _hexagon(radius: int) -> tuple[list[int], list[int]]:
    cells = sorted(
        (q, r, -q - r)
        for q in range(-radius, radius + 1)
        for r in range(-radius, radius + 1)
        if abs(q + r) <= radius
    )
    index = {c: i for i, c in enumerate(cells)}
    return [index[(-r, -s, -q)] for q, r, s in cells], [index[(q, s, r)] for q, r, s in cells]


def _cylinder(g: GroupElement) -> list[int]:
    r, s = g.value
    return [3 * ((i + r) % 4) + (2 - layer if s else layer) for i in range(4) for layer in range(3)]


def _corners(g: GroupElement) -> list[int]:
    fy, fx = g.value
    return [2 * (y ^ fy) + (x ^ fx) for y in range(2) for x in range(2)]


def _grid_graph() -> nx.Graph:
    return nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 3), ordering="sorted")


def _distances(graph: nx.Graph) -> torch.Tensor:
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    nodes = list(graph.nodes)
    return torch.tensor([[float(lengths[u][v]) for v in nodes] for u in nodes])


def _directions(group: PermutationGroup) -> Representation:
    """D6 on the 6 neighbour directions of the centre of the 7-cell hexagon (a permutation representation)."""
    ring = [0, 1, 2, 4, 5, 6]  # every cell but the centre (index 3)

    def directions(g: GroupElement) -> list[int]:
        cells = group.permutation(g)
        return [ring.index(cells[cell]) for cell in ring]

    return PermutationRepresentation(GSet(group, 6, directions, name="directions"))


def _rotation(k: int) -> torch.Tensor:
    angle = 2 * math.pi * k / 6
    return torch.tensor(
        [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
        dtype=torch.float64,
    )


@dataclass
class Structure:
    gset: GSet
    channels: Representation | None = None
    sampled: bool = False  # generators + 200 sampled elements instead of all
    distance: torch.Tensor | None = None

    @property
    def group(self) -> Group:
        return self.gset.group

    @property
    def dim(self) -> int:
        return self.channels.dim if self.channels is not None else DIM

    @property
    def field(self) -> GSetField:
        return GSetField(self.gset, self.channels)


def _build(name: str) -> Structure:
    if name.startswith("S"):
        return Structure(GSet.natural(SymmetricGroup(int(name[1:]))), sampled=True)
    if name == "petersen":
        graph = nx.petersen_graph()
        return Structure(GSet.natural(graph_automorphism_group(graph)), distance=_distances(graph))
    if name == "grid-graph":
        graph = _grid_graph()
        return Structure(GSet.natural(graph_automorphism_group(graph)), distance=_distances(graph))
    if name.startswith("hex"):
        radius = 1 if name.startswith("hex7") else 2
        rotate, reflect = _hexagon(radius)
        gens = [rotate] if name.endswith("C6") else [rotate, reflect]
        return Structure(GSet.natural(PermutationGroup(gens, name=name)))
    if name == "ring16":
        return Structure(GSet.grid(TorusTranslations(1, 16), 1, 16))
    if name == "cylinder":
        group = DirectProduct(CyclicGroup(4), CyclicGroup(2))
        return Structure(GSet(group, 12, _cylinder, name="cylinder"))
    if name == "klein":
        return Structure(GSet(KleinFour(), 4, _corners, name="V4 on corners"))
    if name == "values-C6":  # invariant scalars ⊕ one value per orientation
        rotate, _ = _hexagon(1)
        group = PermutationGroup([rotate], name="C6")
        channels = DirectSumRepresentation([TrivialRepresentation(2), RegularRepresentation(group)])
        return Structure(GSet.natural(group), channels=channels)
    if name == "values-rot":  # C6 on a 6-cycle, channels rotate as 2-D vectors (not a permutation)
        c6 = CyclicGroup(6)
        ring = GSet(c6, 6, lambda g: [(i + g.value) % 6 for i in range(6)], name="6-cycle")
        vectors = MatrixRepresentation(c6, 2, lambda g: _rotation(g.value), name="vectors")
        return Structure(ring, channels=DirectSumRepresentation([vectors, vectors]))
    if name == "values-D6":
        rotate, reflect = _hexagon(1)
        group = PermutationGroup([rotate, reflect], name="D6")
        return Structure(GSet.natural(group), channels=_directions(group))
    raise KeyError(name)


NAMES = [
    "S10",
    "S50",
    "petersen",
    "grid-graph",
    "hex7-C6",
    "hex7-D6",
    "hex19-C6",
    "hex19-D6",
    "ring16",
    "cylinder",
    "klein",
    "values-C6",
    "values-D6",
    "values-rot",
]


@cache
def structure(name: str) -> Structure:
    return _build(name)


def sample_elements(group: Group, count: int, seed: int) -> list[GroupElement]:
    """The generators, then ``count`` seeded random elements (permutations for S_n, else random words)."""
    gen = torch.Generator().manual_seed(seed)
    out = list(group.generators())
    if isinstance(group, SymmetricGroup):
        out += [
            GroupElement(group, tuple(torch.randperm(group.n, generator=gen).tolist()))
            for _ in range(count)
        ]
        return out
    gens = group.generators()
    for _ in range(count):
        g = group.identity()
        for k in torch.randint(len(gens), (40,), generator=gen).tolist():
            g = g * gens[k]
        out.append(g)
    return out


@cache
def elements_of(name: str) -> list[GroupElement]:
    s = structure(name)
    if s.sampled:
        return sample_elements(s.group, 200, seed=len(name))
    return list(s.group.elements())  # type: ignore[attr-defined]


def model_for(name: str, dtype: torch.dtype, bias: str = "orbital", seed: int = 0) -> nn.Module:
    s = structure(name)
    torch.manual_seed(seed)
    layer = OrbitalAttention(
        s.dim, HEADS, s.gset, bias=bias, channels=s.channels, bias_init_std=1.0
    )
    module: nn.Module = layer if s.channels is not None else TransformerBlock(s.dim, layer)
    return module.to(dtype)


def oracle_error(
    fn: Callable[[torch.Tensor], torch.Tensor],
    s: Structure,
    x: torch.Tensor,
    elements: list[GroupElement],
) -> float:
    """Max over elements of ``‖f(g·x) − g·f(x)‖ / ‖g·f(x)‖`` with ``g·`` written by hand in float64.

    ``(g·x)[:, perm[i]] = ρ(g) x[:, i]``, ``perm`` the G-set's permutation, ``ρ`` the channel matrix.
    """
    x64 = x.double()
    with torch.no_grad():
        y = fn(x).double()
        worst = 0.0
        for g in elements:
            perm = s.gset.permutation(g)
            m = None if s.channels is None else s.channels.matrix(g)
            gx = torch.empty_like(x64)
            gx[:, perm] = x64 if m is None else x64 @ m.T
            gy = torch.empty_like(y)
            gy[:, perm] = y if m is None else y @ m.T
            worst = max(worst, relative_error(fn(gx.to(x.dtype)).double(), gy))
    return worst


# ----------------------------------------------------------------------------- every structure, every element
@pytest.mark.parametrize("name", NAMES)
def test_orbital_attention_is_equivariant_on_every_structure(
    name: str, float_dtype: torch.dtype
) -> None:
    s = structure(name)
    model = model_for(name, float_dtype)
    x = torch.randn(2, s.gset.num_points, s.dim, dtype=float_dtype)
    elements = elements_of(name)
    tol = default_tolerance(float_dtype)
    contract = model.contract(s.group)  # type: ignore[operator]
    assert (
        contract.kind == Status.EQUIVARIANT
        and contract.input_type == contract.output_type == s.field
    )
    report = assert_equivariant(model, x, s.group, elements=elements)
    assert len(report.errors) == len(set(elements))
    assert oracle_error(model, s, x, elements) <= tol


@pytest.mark.parametrize("name", NAMES)
def test_pairwise_bias_breaks_every_structure(name: str) -> None:
    s = structure(name)
    model = model_for(name, torch.float64, bias="pairwise")
    contract = model.contract(s.group)  # type: ignore[operator]
    assert contract.kind == Status.BROKEN
    assert "a free bias per token pair is not constant on the orbitals" in (contract.reason or "")
    x = torch.randn(2, s.gset.num_points, s.dim, dtype=torch.float64)
    elements = elements_of(name)[:40]
    assert equivariance_error(model, x, s.group, elements=elements).max_error > 1e-3
    assert oracle_error(model, s, x, elements) > 1e-3


@pytest.mark.parametrize("name", ["petersen", "grid-graph"])
def test_shortest_path_distance_bias(name: str, float_dtype: torch.dtype) -> None:
    s = structure(name)
    assert s.distance is not None
    distance = s.distance
    torch.manual_seed(1)
    bias = ContinuousOrbitalBias(s.gset, HEADS, lambda i, j: distance[i, j], init_std=1.0)
    # the bias is a function of the distance (and exactly constant on orbitals)
    values = bias()
    for d in distance.unique():
        assert values[:, distance == d].std(-1).max() == 0
    model = TransformerBlock(DIM, OrbitalAttention(DIM, HEADS, s.gset, bias=bias)).to(float_dtype)
    x = torch.randn(2, s.gset.num_points, DIM, dtype=float_dtype)
    assert_equivariant(model, x, s.group, elements=elements_of(name))
    assert oracle_error(model, s, x, elements_of(name)) <= default_tolerance(float_dtype)


def test_orbital_counts() -> None:
    counts = {
        name: structure(name).gset.num_orbitals() for name in NAMES if not name.startswith("values")
    }
    assert counts["S10"] == counts["S50"] == 2
    assert counts["petersen"] == 3 and counts["grid-graph"] == 15
    assert (counts["hex7-C6"], counts["hex7-D6"]) == (9, 7)
    assert counts["ring16"] == 16 and counts["cylinder"] == 20 and counts["klein"] == 4
    for name in [
        "petersen",
        "grid-graph",
        "hex7-D6",
        "hex19-C6",
        "cylinder",
        "klein",
    ]:  # Burnside: mean of fix(g)²
        s = structure(name)
        fixed = [
            int((s.gset.permutation(g) == torch.arange(s.gset.num_points)).sum()) ** 2
            for g in elements_of(name)
        ]
        assert counts[name] == sum(fixed) // len(fixed)


# ----------------------------------------------------------------------------- GSetField
@settings(max_examples=20)
@given(data=st.data())
def test_gset_field_action_is_an_exact_permutation(data: st.DataObject) -> None:
    name = data.draw(
        st.sampled_from(["S10", "petersen", "hex19-D6", "ring16", "cylinder", "klein", "values-C6"])
    )
    s = structure(name)
    field = s.field
    b = data.draw(st.integers(1, 3))
    c = s.dim if s.channels is not None else data.draw(st.integers(1, 5))
    g, h = (
        data.draw(st.sampled_from(elements_of(name))),
        data.draw(st.sampled_from(elements_of(name))),
    )
    x = torch.arange(b * s.gset.num_points * c, dtype=torch.float64).reshape(
        b, s.gset.num_points, c
    )
    gx = field.act(s.group, g, x)
    # entries are moved, never combined (what the checker reads off a float64 arange)
    assert torch.equal(torch.sort(gx.flatten()).values, x.flatten())
    assert torch.equal(
        field.act(s.group, g, field.act(s.group, h, x)), field.act(s.group, g * h, x)
    )
    assert torch.equal(field.act(s.group, s.group.identity(), x), x)
    if s.channels is None:
        perm = s.gset.permutation(g)
        for i in range(s.gset.num_points):
            assert torch.equal(gx[:, perm[i]], x[:, i])


def test_gset_field_user_subclass_and_direct_product() -> None:
    v4 = KleinFour()
    corners = GSetField(GSet(v4, 4, _corners, name="V4 on corners"))
    x = torch.arange(8, dtype=torch.float64).reshape(1, 4, 2)
    assert corners.act(v4, (1, 0), x)[0, :, 0].tolist() == [4.0, 6.0, 0.0, 2.0]  # rows y swapped
    for g, h in itertools.product(v4.elements(), repeat=2):
        assert torch.equal(corners.act(v4, g, corners.act(v4, h, x)), corners.act(v4, g * h, x))
    c4c2 = DirectProduct(CyclicGroup(4), CyclicGroup(2))
    cylinder = GSetField(GSet(c4c2, 12, _cylinder, name="cylinder"))
    y = torch.arange(12, dtype=torch.float64).reshape(1, 12, 1)
    moved = cylinder.act(c4c2, (1, 1), y)
    assert (
        moved[0, 5, 0] == 0.0 and moved[0, 4, 0] == 1.0
    )  # token 0 -> 3·1 + 2, token 1 (middle) -> 4
    for g, h in itertools.product(c4c2.elements(), repeat=2):  # type: ignore[attr-defined]
        assert torch.equal(
            cylinder.act(c4c2, g, cylinder.act(c4c2, h, y)), cylinder.act(c4c2, g * h, y)
        )


def test_gset_field_errors_and_value_semantics() -> None:
    s = structure("hex7-D6")
    field = GSetField(s.gset)
    with pytest.raises(
        GroupError,
        match=r"GSetField: expected tokens \(B, N=7, C\) of hex7-D6 on points, got a tensor of shape \(1, 6, 2\)",
    ):
        field.act(s.group, 1, torch.zeros(1, 6, 2))
    with pytest.raises(
        GroupError, match=r"GSetField: expected the group of hex7-D6 on points \(hex7-D6\), got C4"
    ):
        field.act(CyclicGroup(4), 1, torch.zeros(1, 7, 2))
    with pytest.raises(GroupError, match="GSetField: expected a GSet, got 7"):
        GSetField(7)  # type: ignore[arg-type]
    regular = GSetField(s.gset, RegularRepresentation(s.group))  # type: ignore[arg-type]
    with pytest.raises(GroupError, match=r"expected tokens \(B, N=7, C=12\)"):
        regular.act(s.group, 1, torch.zeros(1, 7, 3))
    bad = GSetField(GSet(CyclicGroup(3), 3, lambda g: [0, 0, 1], name="bad"))
    with pytest.raises(GroupError, match=r"bad.* a permutation of"):
        bad.act(CyclicGroup(3), 1, torch.zeros(1, 3, 1))
    # equal by value: the same action built twice
    rotate, reflect = _hexagon(1)
    again = GSetField(GSet.natural(PermutationGroup([rotate, reflect], name="hex7-D6")))
    assert again == field and hash(again) == hash(field)
    assert GSetField(structure("hex7-C6").gset) != field and field != SetField(7)
    assert field.describe() == "gset(B,7,C)[hex7-D6 on points]"
    import copy

    assert copy.deepcopy(GSetField(structure("cylinder").gset)) == GSetField(
        structure("cylinder").gset
    )


def test_set_field_is_the_natural_gset_field() -> None:
    hexagon = PermutationGroup([[1, 2, 3, 4, 5, 0], [0, 5, 4, 3, 2, 1]], name="hexagon")
    field = SetField(6)
    assert (
        isinstance(field, GSetField)
        and field.num_points == 6
        and field == SetField(6) != SetField(5)
    )
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    natural = GSetField(GSet.natural(hexagon))
    for g in hexagon.elements():
        assert torch.equal(field.act(hexagon, g, x), natural.act(hexagon, g, x))
    with pytest.raises(GroupError, match="SetField: expected a permutation group, got C4"):
        field.act(CyclicGroup(4), 1, torch.zeros(1, 6, 2))
    with pytest.raises(GroupError, match=r"SetField: expected a token set \(B, N=6, C\)"):
        field.act(hexagon, 1, torch.zeros(1, 5, 2))
    assert repr(SetField(6)) == "SetField(6)" and field.describe() == "set(B,6,C)"


# ----------------------------------------------------------------------------- biases
@settings(max_examples=15)
@given(data=st.data())
def test_orbital_bias_is_exactly_invariant(data: st.DataObject) -> None:
    name = data.draw(
        st.sampled_from(["S10", "petersen", "grid-graph", "hex19-C6", "cylinder", "klein"])
    )
    s = structure(name)
    heads = data.draw(st.integers(1, 3))
    torch.manual_seed(data.draw(st.integers(0, 100)))
    bias = OrbitalBias(s.gset, heads, init_std=1.0)()
    assert bias.shape == (heads, s.gset.num_points, s.gset.num_points)
    g = data.draw(st.sampled_from(elements_of(name)))
    p = s.gset.permutation(g)
    assert torch.equal(
        bias[:, p[:, None], p[None, :]], bias
    )  # bias[g·i, g·j] = bias[i, j], bit for bit


def test_orbital_bias_is_not_state_and_moves_with_the_module() -> None:
    bias = OrbitalBias(structure("petersen").gset, 2)
    assert [n for n, _ in bias.named_parameters()] == ["table"] and bias.table.shape == (2, 3)
    assert list(bias.state_dict()) == ["table"] and not list(bias.buffers())
    assert bias.orbital_index.dtype == torch.long and bias.orbital_index.shape == (10, 10)
    meta = OrbitalBias(structure("petersen").gset, 2).to("meta")
    assert meta.orbital_index.device.type == "meta" and meta().device.type == "meta"
    double = bias.double()
    assert double().dtype == torch.float64 and double.orbital_index.dtype == torch.long


def test_circulant_bias_is_the_torus_case_with_unchanged_numerics() -> None:
    torch.manual_seed(3)
    circ = CirculantRelativeBias((3, 4), num_heads=2, prefix=1)
    labels = GSet.grid(TorusTranslations(3, 4), 3, 4).orbitals()
    assert torch.equal(circ.orbital_index, labels) and list(circ.state_dict()) == ["table"]
    expected = nn.functional.pad(circ.table[:, labels], (1, 0, 1, 0))
    assert torch.equal(circ(), expected)
    torch.manual_seed(3)
    orbital = OrbitalBias(GSet.grid(TorusTranslations(3, 4), 3, 4), num_heads=2)
    assert torch.equal(orbital.table, circ.table) and torch.equal(orbital(), circ()[:, 1:, 1:])


def test_group_encoding_bias_is_the_same_gather() -> None:
    from groupattn.positional import OrbitalTableEncoding, gather_pair_table, relative_geometry

    torch.manual_seed(0)
    encoding = OrbitalTableEncoding(CyclicGroup(4), 2, lifting=False, grid=4)
    geometry = relative_geometry(CyclicGroup(4), 4, 4)
    table, _ = encoding(geometry)
    assert table is not None
    layer_style = table.index_select(1, geometry.index.reshape(-1)).view(-1, *geometry.index.shape)
    assert torch.equal(encoding.bias(geometry), layer_style)
    assert torch.equal(gather_pair_table(table, geometry.index), layer_style)


def test_orbital_biases_own_their_index_not_the_gsets_cache() -> None:
    """The attack: editing one layer's index in place must reach neither another layer nor the G-set."""
    graph = nx.petersen_graph()
    gset = GSet.natural(
        graph_automorphism_group(graph)
    )  # a fresh G-set: its cache is this test's own
    cached = gset.orbitals().clone()
    lengths = dict(nx.all_pairs_shortest_path_length(graph))
    distance = torch.tensor([[float(lengths[u][v]) for v in graph.nodes] for u in graph.nodes])
    torch.manual_seed(0)
    first, second = OrbitalBias(gset, 2, init_std=1.0), OrbitalBias(gset, 2, init_std=1.0)
    continuous = ContinuousOrbitalBias(gset, 2, distance)
    before = second(), continuous()
    with torch.no_grad():
        first.orbital_index.fill_(0)
    assert torch.equal(
        first(), first.table[:, :1, None].expand(2, 10, 10)
    )  # the edit is the first layer's
    assert torch.equal(gset.orbitals(), cached)
    for layer, out in zip((second, continuous), before):
        assert torch.equal(layer.orbital_index, cached) and torch.equal(layer(), out)
    assert torch.equal(OrbitalBias(gset, 2).orbital_index, cached)  # layers built afterwards too
    with torch.no_grad():  # the other way round: the G-set's cache edited after construction
        gset.orbitals().fill_(0)
    assert torch.equal(second.orbital_index, cached) and torch.equal(second(), before[0])
    storages = {
        t.untyped_storage().data_ptr()
        for t in (gset.orbitals(), first.pair_index, second.pair_index)
    }
    assert len(storages) == 3
    circulants = CirculantRelativeBias((3, 3), 1), CirculantRelativeBias((3, 3), 1)
    assert len({c.orbital_index.untyped_storage().data_ptr() for c in circulants}) == 2


def test_indexed_table_validates_and_follows_the_device() -> None:
    from groupattn.positional import IndexedTable

    class Labelled(PairTableBias):
        def __init__(self, labels: torch.Tensor, num_labels: int | None = None) -> None:
            super().__init__(1)
            self._set_labels(labels, num_labels)
            self.table = nn.Parameter(torch.arange(float(self.num_labels))[None])

        def values(self) -> torch.Tensor:
            return self.table

    labels = torch.tensor([[0, 2], [2, 1]], dtype=torch.int32)
    module = Labelled(labels)
    assert isinstance(module, IndexedTable) and module.num_labels == 3
    assert module.pair_index.dtype == torch.long and torch.equal(module(), labels[None].float())
    with pytest.raises(
        GroupError, match=r"Labelled: expected labels in \[0, 2\), got labels from 0 to 2"
    ):
        Labelled(labels, 2)
    with pytest.raises(
        GroupError, match=r"Labelled: expected labels in \[0, 3\), got labels from -1 to 1"
    ):
        Labelled(torch.tensor([[-1, 1]]), 3)
    with pytest.raises(
        GroupError, match=r"Labelled: expected an integer label tensor, got a torch\.float32 tensor"
    ):
        Labelled(torch.zeros(2, 2))
    meta = Labelled(labels).to("meta")
    assert meta.pair_index.device.type == "meta" and meta().device.type == "meta"
    continuous = ContinuousOrbitalBias(structure("petersen").gset, 2, torch.ones(10, 10)).to("meta")
    assert continuous.features.device.type == "meta" and continuous.pair_index.device.type == "meta"


def test_orbital_biases_compile_without_graph_breaks() -> None:
    from groupattn.positional import OrbitalTableEncoding, relative_geometry

    for module in (
        OrbitalBias(structure("petersen").gset, 2),
        CirculantRelativeBias((3, 4), 2, prefix=1),
    ):
        compiled = torch.compile(module, fullgraph=True, backend="eager")
        assert torch.equal(compiled(), module()) and not list(module.buffers())
    for neighbourhood, size in ((3, None), (None, 4)):
        encoding = OrbitalTableEncoding(
            CyclicGroup(4), 2, lifting=False, neighbourhood=neighbourhood, size=size
        )
        geometry = relative_geometry(
            CyclicGroup(4), 5 if neighbourhood else 4, 5 if neighbourhood else 4, neighbourhood
        )
        gathered = torch.compile(lambda: encoding.bias(geometry), fullgraph=True, backend="eager")()  # noqa: B023
        assert torch.equal(gathered, encoding.bias(geometry)) and not list(encoding.buffers())


def test_labels_contract_decides_exactly() -> None:
    c6, d6 = structure("hex19-C6"), structure("hex19-D6")
    fine, coarse = OrbitalBias(c6.gset, 1), OrbitalBias(d6.gset, 1)
    # D6-orbitals are unions of C6-orbitals: invariant under C6; the converse breaks
    assert coarse.contract(c6.group, GSetField(c6.gset)).kind == Status.INVARIANT
    broken = fine.contract(d6.group, GSetField(d6.gset))
    assert broken.kind == Status.BROKEN and "related by the generator" in (broken.reason or "")
    assert fine.contract(CyclicGroup(4)).kind == Status.UNVERIFIED
    trivial = PermutationGroup([list(range(5))], name="trivial")
    assert PairwiseBias(5, 2).contract(trivial).kind == Status.INVARIANT
    assert PairwiseBias(5, 2).contract(SymmetricGroup(5)).kind == Status.BROKEN
    labels = torch.zeros(4, 4, dtype=torch.long)
    assert (
        labels_contract(labels, SymmetricGroup(4), SetField(4), "m", "r").kind == Status.INVARIANT
    )
    assert (
        labels_contract(labels, SymmetricGroup(4), SetField(5), "m", "r").kind == Status.UNVERIFIED
    )


def test_continuous_bias_validates_the_invariant() -> None:
    s = structure("petersen")
    with pytest.raises(
        GroupError,
        match=r"ContinuousOrbitalBias: expected an invariant constant on the orbitals of .*, got \[.*\] on pair",
    ):
        ContinuousOrbitalBias(s.gset, 2, lambda i, j: (i - j).abs().double())
    with pytest.raises(
        GroupError,
        match=r"expected pair invariants of shape \(N, N\) or \(N, N, F\) with N=10, got \(3,\)",
    ):
        ContinuousOrbitalBias(s.gset, 2, torch.zeros(3))
    with pytest.raises(GroupError, match="expected finite pair invariants"):
        ContinuousOrbitalBias(s.gset, 2, torch.full((10, 10), float("nan")))
    assert s.distance is not None
    two = torch.stack(
        [s.distance, s.distance**2], -1
    )  # several features; rounding noise within tolerance
    bias = ContinuousOrbitalBias(s.gset, 3, two + 1e-12 * torch.rand(10, 10, 2), hidden=8)
    assert bias().shape == (3, 10, 10) and bias.features.shape == (3, 2)
    assert bias.contract(s.group).kind == Status.INVARIANT


# ----------------------------------------------------------------------------- layers and blocks
@settings(max_examples=12)
@given(data=st.data())
def test_orbital_attention_shapes_and_elements(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["S10", "petersen", "hex7-D6", "ring16", "cylinder", "klein"]))
    s = structure(name)
    heads = data.draw(st.integers(1, 3))
    dim = heads * data.draw(st.integers(1, 4))
    batch = data.draw(st.integers(1, 3))
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    torch.manual_seed(data.draw(st.integers(0, 1000)))
    layer = OrbitalAttention(dim, heads, s.gset, bias_init_std=1.0).to(dtype)
    x = torch.randn(batch, s.gset.num_points, dim, dtype=dtype)
    elements = data.draw(st.lists(st.sampled_from(elements_of(name)), min_size=1, max_size=4))
    assert layer(x).shape == x.shape
    assert_equivariant(layer, x, s.group, elements=elements)
    assert oracle_error(layer, s, x, elements) <= default_tolerance(dtype)


def test_orbital_attention_errors_and_contracts() -> None:
    s = structure("hex7-D6")
    layer = OrbitalAttention(8, 2, s.gset)
    with pytest.raises(
        GroupError,
        match=r"OrbitalAttention: expected tokens \(B, N=7, C\) of hex7-D6 on points, got a tensor of shape \(2, 6, 8\)",
    ):
        layer(torch.randn(2, 6, 8))
    with pytest.raises(
        GroupError,
        match=r"OrbitalAttention: expected tokens \(B, N=7, C=8\), got a tensor of shape \(2, 7, 4\)",
    ):
        layer(torch.randn(2, 7, 4))
    with pytest.raises(
        GroupError,
        match="OrbitalAttention: expected a width divisible by the number of heads 3, got 8",
    ):
        OrbitalAttention(8, 3, s.gset)
    with pytest.raises(
        GroupError,
        match="OrbitalAttention: expected bias 'orbital', 'pairwise', None or a module, got 'x'",
    ):
        OrbitalAttention(8, 2, s.gset, bias="x")  # type: ignore[arg-type]
    with pytest.raises(
        GroupError, match="expected dim equal to the channel representation's size 12, got 8"
    ):
        OrbitalAttention(8, 2, s.gset, channels=RegularRepresentation(s.group))  # type: ignore[arg-type]
    assert layer.contract(CyclicGroup(6)).kind == Status.UNVERIFIED
    assert layer.contract(s.group, SetField(7)).kind == Status.UNVERIFIED
    assert OrbitalAttention(8, 2, s.gset, bias=None).contract(s.group).kind == Status.EQUIVARIANT
    # an orbital bias of a smaller group: breaks under the larger one, with the bias's reason
    finer = OrbitalAttention(8, 2, s.gset, bias=OrbitalBias(structure("hex7-C6").gset, 2))
    contract = finer.contract(s.group)
    assert contract.kind == Status.BROKEN and "are not unions of orbitals" in (
        contract.reason or ""
    )


def test_transformer_block_output_type_is_its_input_type() -> None:
    s = structure("cylinder")
    block = TransformerBlock(8, OrbitalAttention(8, 2, s.gset))
    contract = block.contract(s.group)
    assert (
        contract.kind == Status.EQUIVARIANT
        and contract.input_type == contract.output_type == GSetField(s.gset)
    )
    grid = TransformerBlock(8, GlobalSelfAttention(8, 2, (4, 4), prefix=1)).contract(
        TorusTranslations(4, 4)
    )
    assert grid.output_type == grid.input_type == TokenField((4, 4), prefix=1)
    values = structure("values-C6")
    with_rep = TransformerBlock(
        values.dim, OrbitalAttention(values.dim, 2, values.gset, channels=values.channels)
    )
    broken = with_rep.contract(values.group)
    assert broken.kind == Status.BROKEN and "LayerNorm and the MLP mix channels" in (
        broken.reason or ""
    )
    pairwise = TransformerBlock(8, OrbitalAttention(8, 2, s.gset, bias="pairwise")).contract(
        s.group
    )
    assert pairwise.kind == Status.BROKEN and (pairwise.reason or "").startswith(
        "attention: OrbitalAttention"
    )


def test_mean_pooling_is_invariant_under_any_gset(float_dtype: torch.dtype) -> None:
    pool = MeanPooling()
    for name in ["S50", "petersen", "hex19-D6", "cylinder", "klein"]:
        s = structure(name)
        contract = pool.contract(s.group, GSetField(s.gset))
        assert contract.kind == Status.INVARIANT and contract.output_type == InvariantField()
        x = torch.randn(3, s.gset.num_points, 4, dtype=float_dtype)
        assert_equivariant(
            pool, x, s.group, elements=elements_of(name)[:50], input_type=GSetField(s.gset)
        )
    assert pool.contract(SymmetricGroup(5), SetField(5)).kind == Status.INVARIANT
    assert pool.contract(SymmetricGroup(5)).kind == Status.UNVERIFIED  # no layout, nothing promised
    values = structure("values-C6")
    assert pool.contract(values.group, values.field).kind == Status.UNVERIFIED
    assert MeanPooling(prefix=1).contract(SymmetricGroup(5), SetField(5)).kind == Status.BROKEN
    assert MeanPooling((4, 4)).contract(TorusTranslations(4, 4)).kind == Status.INVARIANT
    with pytest.raises(GroupError, match=r"MeanPooling: expected tokens \(B, N, C\) with N > 0"):
        pool(torch.randn(3, 4))


# ----------------------------------------------------------------------------- equivariant values
@pytest.mark.parametrize(
    ("name", "invariants", "maps"),
    [("values-C6", 3, 14), ("values-D6", 1, 4), ("values-rot", 0, 8)],
)
def test_value_maps_are_intertwiners(name: str, invariants: int, maps: int) -> None:
    s = structure(name)
    assert s.channels is not None
    layer = OrbitalAttention(s.dim, 2, s.gset, channels=s.channels)
    assert layer.invariant_basis.shape == (invariants, s.dim) and layer.value_basis.shape == (
        maps,
        s.dim,
        s.dim,
    )
    assert layer.use_norm  # permutation and rotation matrices are orthogonal
    for g in s.group.generators():
        m = s.channels.matrix(g)
        assert torch.allclose(layer.value_basis @ m, m @ layer.value_basis, atol=1e-12)
        assert torch.allclose(layer.invariant_basis @ m, layer.invariant_basis, atol=1e-12)
    assert {n for n, _ in layer.named_parameters()} == {
        "bias.table",
        "query_key.weight",
        "query_key.bias",
        "value_coefficients",
        "output_coefficients",
    }


def test_plain_layer_breaks_a_representation_carrying_field() -> None:
    for name in ["values-C6", "values-D6", "values-rot"]:
        s = structure(name)
        plain = OrbitalAttention(s.dim, 2, s.gset, bias_init_std=1.0).double()
        x = torch.randn(2, s.gset.num_points, s.dim, dtype=torch.float64)
        assert (
            equivariance_error(plain, x, s.group, input_type=s.field, output_type=s.field).max_error
            > 1e-3
        )


# ----------------------------------------------------------------------------- EquivariantModule
class _Scale(EquivariantModule):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


class _Breaks(_Scale):
    def breaks_reason(self, group: Group) -> str | None:
        return "it says so"


def test_equivariant_module_checks_input_and_derives_its_contract() -> None:
    s = structure("petersen")
    field = GSetField(s.gset)
    module = _Scale(field, field)
    assert module(torch.ones(1, 10, 3)).shape == (1, 10, 3)
    with pytest.raises(
        GroupError,
        match=r"_Scale: expected tokens \(B, N=10, C\) of .*, got a tensor of shape \(1, 9, 3\)",
    ):
        module(torch.ones(1, 9, 3))
    with pytest.raises(GroupError, match="_Scale: expected a tensor of type gset"):
        module([1, 2])  # type: ignore[arg-type]
    assert module.contract(s.group) == Contract.equivariant(field, field)
    assert module.contract(s.group, field).kind == Status.EQUIVARIANT
    assert module.contract(SymmetricGroup(10)).kind == Status.UNVERIFIED
    assert module.contract(s.group, SetField(10)).kind == Status.UNVERIFIED
    assert _Scale(field, InvariantField()).contract(s.group).kind == Status.INVARIANT
    broken = _Breaks(field, field).contract(s.group)
    assert broken.kind == Status.BROKEN and broken.reason == "_Breaks: it says so"
    grid = _Scale(GridField(), GridField(), group=TorusTranslations(4, 4))
    assert grid.contract(TorusTranslations(4, 4)).kind == Status.EQUIVARIANT
    assert (
        _Scale(GridField(), GridField()).contract(TorusTranslations(4, 4)).kind == Status.UNVERIFIED
    )
    with pytest.raises(GroupError, match="expected a FieldType as in_type"):
        _Scale(3, field)  # type: ignore[arg-type]
    assert module(x=torch.ones(1, 10, 2)).shape == (1, 10, 2)


def test_orbital_attention_compiles_without_graph_breaks() -> None:
    s = structure("hex7-D6")
    layer = OrbitalAttention(8, 2, s.gset)
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    x = torch.randn(2, 7, 8)
    torch.testing.assert_close(compiled(x), layer(x))
