"""Tracing and propagation: torch.fx graph → networkx DiGraph → symbolic values per node."""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx
import torch
import torch.fx as fx
from torch import nn

from ..actions import FieldType
from ..canonical import Canonicalized
from ..contracts import ContractError, Kind, contract_of, registered_contract
from ..contracts import _contract as _contract_module
from ..groups import Group
from . import _torch_contracts
from ._layout import describe_layout, field_from_layout, invariant_layout, layout_from_field
from ._rules import Call, has_module_rule, rule_for
from ._symbols import (
    BROKEN,
    OK,
    UNKNOWN,
    Breaks,
    Frame,
    FrameSym,
    StaticSym,
    Sym,
    TensorSym,
    TupleSym,
    Unverifiable,
    describe_frame,
)

__all__ = ["NodeRecord", "Propagation", "propagate", "trace"]


def _declares_contract(module: nn.Module) -> bool:
    return callable(getattr(module, "contract", None))


class CheckTracer(fx.Tracer):
    """torch.fx tracer keeping contract-declaring modules and known torch modules as leaves."""

    def __init__(self, autowrap: tuple[Callable[..., Any], ...] = ()) -> None:
        super().__init__(autowrap_functions=autowrap)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if _declares_contract(m) or has_module_rule(m) or registered_contract(m) is not None:
            return True
        return super().is_leaf_module(m, module_qualified_name)


def _autowrap_functions() -> tuple[Callable[..., Any], ...]:
    funcs: list[Callable[..., Any]] = []
    for target in list(_contract_module._REGISTRY):
        if callable(target) and not isinstance(target, type) and hasattr(target, "__globals__"):
            funcs.append(target)
    try:
        import einops

        funcs += [einops.rearrange, einops.repeat, einops.reduce]
    except ImportError:  # pragma: no cover
        pass
    return tuple(funcs)


def trace(model: nn.Module) -> fx.GraphModule:
    """Symbolically trace ``model`` with the checker's leaf rules."""
    tracer = CheckTracer(_autowrap_functions())
    graph = tracer.trace(model)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


@dataclass
class NodeRecord:
    """What the checker concluded at one node of the graph.

    Attributes
    ----------
    name
        Node name (prefixed by the child's path for composed children).
    op, target
        The fx op and a readable callee.
    status
        ``equivariant``, ``invariant``, ``canonicalizing``, ``frame-restoring``,
        ``constant``, ``broken`` (the node breaks equivariance), ``tainted`` (an input
        is already broken), ``unverified`` (the checker cannot tell) or ``unchecked``
        (an input is unverified), or ``static`` (shapes and other Python values).
    description
        The output's layout (and frame).
    reason
        Why it breaks or is unverified.
    """

    name: str
    op: str
    target: str
    status: str
    description: str = ""
    reason: str | None = None
    group: str | None = None


@dataclass
class Propagation:
    """The outcome of propagating symbolic values through a traced model."""

    graph: nx.DiGraph
    records: dict[str, NodeRecord]
    output: Sym
    input_node: str
    order: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _leaves(v: Any) -> list[Any]:
    if isinstance(v, list | tuple):
        return [x for item in v for x in _leaves(item)]
    if isinstance(v, dict):
        return [x for item in v.values() for x in _leaves(item)]
    return [v]


def _combined_status(values: list[Any]) -> str:
    statuses = [v.status for v in values if isinstance(v, Sym)]
    if BROKEN in statuses:
        return BROKEN
    if UNKNOWN in statuses:
        return UNKNOWN
    return OK


def _force_status(sym: Any, status: str) -> Any:
    if isinstance(sym, TupleSym):
        return TupleSym(status=status, items=tuple(_force_status(i, status) for i in sym.items), names=sym.names)
    if isinstance(sym, Sym):
        return sym.with_status(status)
    return sym


def _symbolize_invariant(out: Any, constant: bool, group: Group | None) -> Any:
    if isinstance(out, torch.Tensor):
        return TensorSym(layout=invariant_layout(tuple(out.shape)), group=group, constant=constant)
    if isinstance(out, tuple | list):
        names = tuple(getattr(out, "_fields", ()))
        return TupleSym(items=tuple(_symbolize_invariant(o, constant, group) for o in out), names=names)
    return StaticSym(value=out)


def _target_name(node: fx.Node, root: nn.Module | None = None) -> str:
    t = node.target
    if node.op == "call_module" and root is not None and isinstance(t, str):
        try:
            return f"{t} ({type(root.get_submodule(t)).__name__})"
        except AttributeError:
            return t
    if node.op == "call_method":
        return f".{t}()"
    if isinstance(t, str):
        return t
    mod = getattr(t, "__module__", "") or ""
    name = getattr(t, "__name__", repr(t))
    if mod in ("_operator", "operator", "builtins"):
        return name
    return f"{mod.replace('torch.nn.functional', 'F')}.{name}"


class _Propagator:
    def __init__(self, root: nn.Module, prefix: str = "") -> None:
        self.root = root
        self.prefix = prefix
        self.records: dict[str, NodeRecord] = {}
        self.graph = nx.DiGraph()
        self.order: list[str] = []
        self.frame_count = [0]
        self.child_records: dict[str, NodeRecord] = {}
        self.child_graphs: list[nx.DiGraph] = []
        self.gm: fx.GraphModule | None = None

    # ------------------------------------------------------------------ driver
    def run(self, gm: fx.GraphModule, inputs: list[tuple[torch.Tensor, Sym]]) -> tuple[Sym, Any]:
        self.gm = gm
        env: dict[fx.Node, Any] = {}
        sym_env: dict[fx.Node, Any] = {}
        interp = fx.Interpreter(gm)
        graph_inputs = iter(inputs)
        output_sym: Sym = StaticSym(value=None)
        output_value: Any = None
        for node in gm.graph.nodes:
            name = self.prefix + node.name
            self.order.append(name)
            self.graph.add_node(name)
            for src in node.all_input_nodes:
                self.graph.add_edge(self.prefix + src.name, name)
            if node.op == "placeholder":
                value: Any
                try:
                    value, sym = next(graph_inputs)
                except StopIteration:
                    value = node.args[0] if node.args else None
                    sym = StaticSym(value=value)
                env[node], sym_env[node] = value, sym
                self._record(node, name, sym, None, "input")
                continue
            if node.op == "output":
                output_value = fx.node.map_arg(node.args[0], lambda n: env[n])
                output_sym = _main(fx.node.map_arg(node.args[0], lambda n: sym_env[n]))
                self._record(node, name, output_sym, None, None)
                continue
            args = fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
            with torch.no_grad():
                if node.op == "get_attr":
                    value = interp.fetch_attr(node.target)
                elif node.op == "call_module":
                    value = gm.get_submodule(node.target)(*args, **kwargs)
                elif node.op == "call_function":
                    value = node.target(*args, **kwargs)
                else:
                    self_obj, *rest = args
                    value = getattr(self_obj, node.target)(*rest, **kwargs)
            env[node] = value
            sargs = fx.node.map_arg(node.args, lambda n: sym_env[n])
            skwargs = fx.node.map_arg(node.kwargs, lambda n: sym_env[n])
            sym, reason, origin = self._evaluate(gm, node, name, args, kwargs, sargs, skwargs, value)
            sym_env[node] = sym
            self._record(node, name, sym, reason, origin)
        return output_sym, output_value

    # ------------------------------------------------------------------ one node
    def _evaluate(
        self, gm: fx.GraphModule, node: fx.Node, name: str, args: Any, kwargs: Any, sargs: Any, skwargs: Any, value: Any
    ) -> tuple[Any, str | None, str | None]:
        if node.op == "get_attr":
            if isinstance(value, torch.Tensor):
                return TensorSym(layout=invariant_layout(tuple(value.shape)), constant=True), None, "constant"
            return StaticSym(value=value), None, None
        module = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
        target = module if module is not None else node.target
        call = Call(name, target, module, tuple(args), dict(kwargs), tuple(sargs), dict(skwargs), value)
        inputs = [v for v in _leaves((sargs, skwargs)) if isinstance(v, Sym)]
        status = _combined_status(inputs)
        try:
            sym = self._apply(gm, node, call, inputs)
            _check_shapes(call, sym, value)
            problem, origin = None, None
        except Breaks as err:
            sym, problem, origin = _blank(value, BROKEN), str(err), "break"
        except Unverifiable as err:
            sym, problem, origin = _blank(value, UNKNOWN), str(err), "unknown"
        except Exception as err:
            sym, problem, origin = _blank(value, UNKNOWN), f"{call.label}: the checker failed on it ({type(err).__name__}: {err})", "unknown"
        if status != OK:
            # an input is already broken or unverified: the output inherits that
            if origin == "break" and status == UNKNOWN:
                return sym, problem, origin
            return _force_status(sym, status), None, None
        if origin is None and isinstance(sym, Sym) and sym.status != OK:
            origin = "break" if sym.status == BROKEN else "unknown"
            problem = f"{call.label}: its result is not tracked (e.g. arg-max positions along a moved axis)"
        return sym, problem, origin

    def _apply(self, gm: fx.GraphModule, node: fx.Node, call: Call, inputs: list[Sym]) -> Any:
        value = call.out
        # getattr / getitem on tuples, canonicalizer results and static values
        if node.op == "call_function" and node.target in (operator.getitem, builtins.getattr):
            base = call.sargs[0]
            key = call.args[1]
            if isinstance(base, TupleSym):
                if isinstance(key, str):
                    if key in base.names:
                        return base.items[base.names.index(key)]
                    raise Unverifiable(f"getattr: unknown field {key!r}")
                if isinstance(key, int):
                    return base.items[key]
                return TupleSym(items=tuple(base.items[key]))
            if isinstance(base, StaticSym):
                return StaticSym(value=value)
            if isinstance(base, FrameSym):
                raise Unverifiable("uses the canonicalizer's frame as data")
            if isinstance(base, TensorSym) and node.target is builtins.getattr:
                if isinstance(value, torch.Tensor):
                    rule = rule_for("call_method", "t" if key in ("T", "mT") else key)
                    if key in ("T", "mT"):
                        call = Call(call.name, "t" if key == "T" else "transpose", None, (call.args[0],) + (() if key == "T" else (-2, -1)), {}, (base,) + (() if key == "T" else (-2, -1)), {}, value)
                    if rule is None:
                        raise Unverifiable(f"attribute {key!r} of a tensor is not tracked")
                    return rule(call)
                return StaticSym(value=value)
        if node.op == "call_method" and node.target in ("size", "dim", "numel", "ndimension", "type", "is_contiguous", "element_size", "get_device"):
            return StaticSym(value=value)
        frames = [v for v in inputs if isinstance(v, FrameSym)]
        tensors = [v for v in inputs if isinstance(v, TensorSym)]
        # everything the group does not move gives a result the group does not move
        if not frames and all(t.invariant for t in tensors) and all(
            not isinstance(v, TupleSym) for v in inputs
        ):
            if not tensors:
                if isinstance(value, torch.Tensor):
                    _torch_contracts.check_not_random(call, node.op)
                    rule = rule_for(node.op, call.target)
                    if rule is not None and node.op == "call_function":
                        return rule(call)
                    origin = call.module if call.module is not None and _declares_contract(call.module) else None
                    return TensorSym(layout=invariant_layout(tuple(value.shape)), constant=True, origin=origin)
                return _symbolize_invariant(value, True, None) if isinstance(value, tuple | list) else StaticSym(value=value)
            _torch_contracts.check_not_random(call, node.op)
            result = _symbolize_invariant(value, all(t.constant for t in tensors), tensors[0].group)
            origins = {id(t.origin): t.origin for t in tensors if t.origin is not None}
            if len(origins) == 1 and isinstance(result, TensorSym):
                result = replace(result, origin=next(iter(origins.values())))
            return result
        if node.op == "call_module":
            module = call.module
            assert module is not None
            if _declares_contract(module):
                return self._by_contract(call, module, frames)
            rule = rule_for("call_module", module)
            if rule is not None:
                self._no_frames(call, frames)
                return rule(call)
            if registered_contract(module) is not None:
                return self._by_contract(call, module, frames)
            return self._compose_child(call, module, tensors)
        rule = rule_for(node.op, node.target)
        if rule is not None:
            self._no_frames(call, frames)
            return rule(call)
        if node.op == "call_function" and registered_contract(node.target) is not None:
            return self._by_contract(call, node.target, frames)
        raise Unverifiable(f"{call.label}: no contract is declared or registered for it")

    @staticmethod
    def _no_frames(call: Call, frames: list[FrameSym]) -> None:
        if frames:
            raise Unverifiable(f"{call.label}: uses a canonicalizer's frame as data")

    # ------------------------------------------------------------------ contracts
    def _by_contract(self, call: Call, target: Any, frames: list[FrameSym]) -> Any:
        tensors = call.tensor_syms()
        if not tensors:
            raise Unverifiable(f"{call.label}: no tensor input")
        x = tensors[0]
        if x.layout is None:
            raise Unverifiable(f"{call.label}: the layout of its input is unknown")
        in_field = field_from_layout(x.layout, x.group)
        if x.group is None:
            raise Unverifiable(f"{call.label}: no acting group")
        try:
            contract = contract_of(target, x.group, in_field)
        except (ContractError, ValueError) as err:
            raise Unverifiable(f"{call.label}: cannot state a contract for {describe_layout(x.layout)} under {getattr(x.group, 'name', '?')} ({err})") from err
        kind = contract.kind
        if kind == Kind.BREAKS:
            raise Breaks(contract.reason or f"{call.label} declares that it breaks equivariance")
        if kind == Kind.UNKNOWN:
            raise Unverifiable(contract.reason or f"{call.label} promises nothing")
        declared = contract.input_type[0] if isinstance(contract.input_type, tuple) else contract.input_type
        x_shape = tuple(math.prod(a.size for a in d) for d in x.layout)
        if isinstance(declared, FieldType):
            expected = layout_from_field(declared, x_shape)
            if expected is None or tuple(expected) != tuple(x.layout):
                raise Unverifiable(
                    f"{call.label} expects {declared.describe()} but receives {describe_layout(x.layout)}"
                )
        value = call.out
        main = value.output if isinstance(value, Canonicalized) else value
        if isinstance(main, tuple | list) and main and isinstance(main[0], torch.Tensor):
            main = main[0]
        if not isinstance(main, torch.Tensor):
            raise Unverifiable(f"{call.label}: expected a tensor output, got {type(main).__name__}")
        out_group: Group | None = contract.output_group or x.group
        if kind != Kind.FRAME_RESTORING:
            self._same_frames(call, tensors)
        if kind == Kind.INVARIANT:
            return _symbolize_invariant(value, False, x.group)
        if kind == Kind.FRAME_RESTORING:
            frame_arg = call.arg(1, "frame")[1]
            if isinstance(frame_arg, FrameSym):
                frame = frame_arg.frame
                assert frame is not None
                if not x.invariant and x.frame != frame:
                    raise Breaks(
                        f"{call.label} restores {describe_frame(frame)} but its input is in {describe_frame(x.frame)}"
                    )
                if frame.out_group is not None and x.group != frame.out_group:
                    raise Unverifiable(
                        f"{call.label} restores {describe_frame(frame)}, but the group acting on its input changed "
                        f"since then ({frame.out_group.name} -> {getattr(x.group, 'name', '?')}, e.g. a strided layer)"
                    )
                new_frame, out_group = frame.parent, contract.output_group or frame.group
            elif isinstance(frame_arg, TensorSym) and frame_arg.invariant:
                new_frame = x.frame
            else:
                raise Unverifiable(f"{call.label}: its frame argument is not a canonicalizer's frame")
            others = [t for t in tensors[1:] if t is not frame_arg]
            self._same_frames(call, [x, *others])
            return self._wrap(call, contract, main, value, out_group, new_frame, None)
        if frames:
            raise Unverifiable(f"{call.label}: uses a canonicalizer's frame as data")
        frame = self._same_frames(call, tensors)
        if kind == Kind.CANONICALIZING:
            self.frame_count[0] += 1
            new = Frame(f"F{self.frame_count[0]}", call.name, frame, x.group, out_group)
            return self._wrap(call, contract, main, value, out_group, new, new)
        return self._wrap(call, contract, main, value, out_group, frame, None)

    @staticmethod
    def _same_frames(call: Call, tensors: list[TensorSym]) -> Any:
        moving = [t for t in tensors if not t.invariant]
        if not moving:
            return None
        for t in moving[1:]:
            if t.frame != moving[0].frame:
                raise Breaks(
                    f"{call.label} combines tensors from different frames: "
                    f"{describe_frame(moving[0].frame)} and {describe_frame(t.frame)}"
                )
        return moving[0].frame

    def _wrap(self, call: Call, contract: Any, main: torch.Tensor, value: Any, group: Any, frame: Frame | None, new: Frame | None) -> Any:
        x = call.tensor_syms()[0]
        if contract.output_type is not None:
            layout = layout_from_field(contract.output_type, tuple(main.shape))
        else:
            layout = x.layout if tuple(main.shape) == tuple(math.prod(a.size for a in d) for d in x.layout) else None  # type: ignore[union-attr]
        if layout is None:
            desc = contract.output_type.describe() if contract.output_type is not None else "?"
            raise Unverifiable(
                f"{call.label}: its declared output type {desc} does not fit its output of shape {tuple(main.shape)}"
            )
        sym = TensorSym(layout=layout, group=group, frame=frame)
        if isinstance(value, Canonicalized):
            frame_sym: Sym = FrameSym(frame=new) if new is not None else _symbolize_invariant(value.frame, False, group)
            margin = _symbolize_invariant(value.margin, False, group)
            return TupleSym(items=(sym, frame_sym, margin), names=("output", "frame", "margin"))
        if isinstance(value, tuple | list):
            rest = [_blank(v, UNKNOWN) for v in value[1:]]
            return TupleSym(items=(sym, *rest))
        return sym

    # ------------------------------------------------------------------ children
    def _compose_child(self, call: Call, module: nn.Module, tensors: list[TensorSym]) -> Any:
        name = type(module).__name__
        if not list(module.children()) and not list(module.parameters(recurse=False)) and not isinstance(module, nn.Sequential):
            raise Unverifiable(f"{name}: no contract is declared or registered for it")
        try:
            gm = trace(module)
        except Exception as err:
            raise Unverifiable(f"{name}: declares no contract and torch.fx cannot trace it ({type(err).__name__}: {err})") from err
        inputs = [(a, s) for a, s in zip(call.args, call.sargs)]
        sub = _Propagator(module, prefix=call.name + ".")
        sub.frame_count = self.frame_count
        out_sym, _ = sub.run(gm, inputs)
        bad = [r for r in sub.records.values() if r.status in ("broken", "unverified")]
        self.child_records.update(sub.records)
        self.child_records.update(sub.child_records)
        self.child_graphs.append(sub.graph)
        self.child_graphs.extend(sub.child_graphs)
        if isinstance(out_sym, Sym) and out_sym.status == BROKEN:
            first = next((r for r in bad if r.status == "broken"), None)
            raise Breaks(f"inside {name}: {first.name}: {first.reason}" if first else f"inside {name}")
        if isinstance(out_sym, Sym) and out_sym.status == UNKNOWN:
            first = next((r for r in bad if r.status == "unverified"), None)
            raise Unverifiable(f"inside {name}: {first.name}: {first.reason}" if first else f"inside {name}")
        return out_sym

    # ------------------------------------------------------------------ records
    def _record(self, node: fx.Node, name: str, sym: Any, reason: str | None, origin: str | None) -> None:
        if isinstance(sym, TupleSym) and sym.names == ("output", "frame", "margin"):
            main = sym.items[0]
        else:
            main = _main(sym)
        if origin == "break":
            status = "broken"
        elif origin == "unknown":
            status = "unverified"
        elif origin == "input":
            status = "input"
        elif isinstance(main, Sym) and main.status == BROKEN:
            status = "tainted"
        elif isinstance(main, Sym) and main.status == UNKNOWN:
            status = "unchecked"
        elif isinstance(sym, TupleSym) and isinstance(sym.items[1:2], tuple) and any(isinstance(i, FrameSym) for i in sym.items):
            status = "canonicalizing"
        elif isinstance(main, TensorSym):
            if main.constant:
                status = "constant"
            elif main.invariant:
                status = "invariant"
            elif main.frame is not None and main.frame.node == name:
                status = "canonicalizing"
            elif main.frame is not None:
                status = f"equivariant in {main.frame.tag}"
            else:
                status = "equivariant"
        elif isinstance(main, FrameSym):
            status = "frame"
        else:
            status = "static"
        desc = main.describe() if isinstance(main, Sym) and hasattr(main, "describe") else ""
        group = getattr(getattr(main, "group", None), "name", None)
        target = _target_name(node, self.gm)
        self.records[name] = NodeRecord(name, node.op, target, status, desc, reason, group)
        self.graph.nodes[name].update(status=status, op=node.op, target=target, description=desc, reason=reason or "")


def _check_shapes(call: Call, sym: Any, value: Any) -> None:
    """A safety net: every tracked layout must match the concrete output's shape."""
    if isinstance(sym, TensorSym) and sym.layout is not None:
        if not isinstance(value, torch.Tensor):
            raise Unverifiable(f"{call.label}: expected a tensor output, got {type(value).__name__}")
        sizes = tuple(math.prod(a.size for a in d) for d in sym.layout)
        if sizes != tuple(value.shape):
            raise Unverifiable(
                f"{call.label}: the checker's layout {describe_layout(sym.layout)} does not match the output "
                f"shape {tuple(value.shape)}"
            )
    elif isinstance(sym, TupleSym) and isinstance(value, tuple | list) and len(value) == len(sym.items):
        for item, v in zip(sym.items, value):
            _check_shapes(call, item, v)


def _blank(value: Any, status: str) -> Any:
    if isinstance(value, tuple | list):
        return TupleSym(status=status, items=tuple(_blank(v, status) for v in value), names=tuple(getattr(value, "_fields", ())))
    if isinstance(value, torch.Tensor):
        return TensorSym(status=status, layout=None)
    return StaticSym(status=status, value=value)


def _main(sym: Any) -> Any:
    if isinstance(sym, TupleSym):
        if sym.names[:1] == ("output",):
            return sym.items[0]
        for item in sym.items:
            m = _main(item)
            if isinstance(m, TensorSym):
                return m
        return sym.items[0] if sym.items else StaticSym(value=None)
    if isinstance(sym, list | tuple):
        return _main(TupleSym(items=tuple(sym)))
    if isinstance(sym, dict):
        return _main(TupleSym(items=tuple(sym.values())))
    return sym


def propagate(model: nn.Module, example: torch.Tensor, input_sym: TensorSym) -> Propagation:
    """Trace ``model`` (or compose a :class:`~torch.nn.Sequential`'s children) and propagate.

    Raises
    ------
    Unverifiable
        When the model can neither be traced nor composed from its children.
    """
    primitive = _declares_contract(model) and not any(
        _declares_contract(m) for m in model.modules() if m is not model
    )
    if (has_module_rule(model) and not _declares_contract(model)) or primitive:
        # a single known torch module, or a library layer built from no declared parts:
        # check it as one node (its contract is all there is to compose)
        model = nn.Sequential(model)
    notes: list[str] = []
    try:
        gm = trace(model)
    except Exception as err:
        if isinstance(model, nn.Sequential):
            gm = _sequential_graph(model)
            notes.append(f"torch.fx cannot trace {type(model).__name__} as a whole; composed from its children")
        elif _declares_contract(model):
            model = nn.Sequential(model)
            gm = _sequential_graph(model)
            notes.append(
                f"torch.fx cannot trace the body of {type(model[0]).__name__} ({type(err).__name__}); "
                "checked by its declared contract only"
            )
        else:
            raise Unverifiable(
                f"torch.fx cannot trace {type(model).__name__} ({type(err).__name__}: {err}); it is not a "
                "Sequential either, so the checker cannot compose its children — give it a contract, or make "
                "its forward traceable"
            ) from err
    prop = _Propagator(model)
    out_sym, _ = prop.run(gm, [(example, input_sym)])
    graph = prop.graph
    for sub in prop.child_graphs:
        graph = nx.compose(graph, sub)
    records = {**prop.records, **prop.child_records}
    input_node = next(iter(prop.records))
    return Propagation(graph, records, out_sym, input_node, prop.order, notes)


def _sequential_graph(model: nn.Sequential) -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("x")
    for name, _child in model.named_children():
        x = graph.call_module(name, (x,))
    graph.output(x)
    return fx.GraphModule(model, graph, type(model).__name__)
