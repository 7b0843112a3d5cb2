"""The cases of ``groupattn bench``: what is measured against what."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["MIN_PEAK_MIB", "PUBLISHED_GSA", "BenchCase", "Measurement", "bench_cases"]

PUBLISHED_GSA: dict[str, dict[str, float]] = {
    "lifting_global": {"forward_s": 4.6, "forward_gib": 3.5, "train_s": 9.7, "train_gib": 4.9},
    "lifting_local5": {"forward_s": 0.22, "forward_gib": 0.35, "train_s": 0.36, "train_gib": 0.42},
    "group_local5": {"forward_s": 2.4, "forward_gib": 1.5, "train_s": 2.8, "train_gib": 1.8},
    "group_global_b1": {"forward_s": 6.4, "forward_gib": 5.0, "train_s": 14.6, "train_gib": 6.3},
}
"""The published GSA-Nets layers (Romero & Cordonnier, 2021; their code, p4, 28 × 28,
batch 8 — group global: batch 1 — 9 heads × 20 channels, 2 threads), measured on a
2-core CPU machine of the kind this project's CI uses: seconds and GiB of the forward
pass and of a training step (forward + backward). The reference of the ``gsa_*`` cases."""


@dataclass
class Measurement:
    """What one side of a case costs.

    Attributes
    ----------
    forward_s, train_s
        Best time of a forward pass (no gradients) and of a training step (forward,
        backward), in seconds; ``None`` where not measured.
    peak_forward_mib, peak_train_mib
        Resident-memory high-water mark of the process above its level before the side
        ran, during the forward passes and during the training steps (MiB).
    flops_forward, flops_train
        Floating-point operations counted by ``torch.utils.flop_counter`` (matrix
        products and convolutions; elementwise work is not counted), or ``None``.
    """

    forward_s: float | None = None
    train_s: float | None = None
    peak_forward_mib: float | None = None
    peak_train_mib: float | None = None
    flops_forward: float | None = None
    flops_train: float | None = None


@dataclass(frozen=True)
class BenchCase:
    """One benchmark case: a subject measured against its reference.

    Attributes
    ----------
    name
        Case name on the command line.
    description
        What is measured.
    reference
        What the ratios are relative to.
    subject
        ``subject()`` returns ``(module, input, wants_training)`` — built fresh in the
        case's own process.
    baseline
        The same for the reference side, or ``None`` when the reference is a fixed set
        of published figures (``published``).
    published
        Published seconds and GiB (see [`PUBLISHED_GSA`][groupattn.bench.PUBLISHED_GSA]).
    flops
        Also count the arithmetic of both sides.
    groups
        Names of the case families it belongs to (``gsa``, ``models``, …).
    """

    name: str
    description: str
    reference: str
    subject: Callable[[], tuple[nn.Module, torch.Tensor]]
    baseline: Callable[[], tuple[nn.Module, torch.Tensor]] | None = None
    published: dict[str, float] | None = None
    flops: bool = False
    groups: tuple[str, ...] = field(default_factory=tuple)
    certify_group: str | None = None


def _gsa_layer(
    kind: str, neighbourhood: int | None, batch: int, head_dim: int
) -> Callable[[], tuple[nn.Module, torch.Tensor]]:
    def build() -> tuple[nn.Module, torch.Tensor]:
        from ..attention import GroupSelfAttention, LiftingSelfAttention

        torch.manual_seed(0)
        size, channels, heads = 28, 20, 9
        if kind == "lifting":
            x = torch.randn(batch, 1, size, size)
            layer: nn.Module = LiftingSelfAttention(
                1, channels, "C4", num_heads=heads, head_dim=head_dim, neighbourhood=neighbourhood
            )
        else:
            x = torch.randn(batch, channels, 4, size, size)
            layer = GroupSelfAttention(
                channels,
                channels,
                "C4",
                num_heads=heads,
                head_dim=head_dim,
                neighbourhood=neighbourhood,
            )
        return layer, x

    return build


class _AttentionOnly(nn.Module):
    """Projections and plain SDPA over the same tokens, no positional bias."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.num_heads = num_heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = (
            self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        )
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


def _orbital_bias() -> tuple[nn.Module, torch.Tensor]:
    from ..attention import GlobalSelfAttention

    torch.manual_seed(0)
    return GlobalSelfAttention(256, 4, (32, 32), bias="circulant"), torch.randn(8, 1024, 256)


def _plain_attention() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _AttentionOnly(256, 4), torch.randn(8, 1024, 256)


class _Strided(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., ::2, ::2].contiguous()


class _Anchored(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from ..canonical import AdaptivePolyphaseDownsample

        self.down = AdaptivePolyphaseDownsample(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(x).output


def _images() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(32, 64, 32, 32)


def _model(name: str, equivariant: bool) -> Callable[[], tuple[nn.Module, torch.Tensor]]:
    def build() -> tuple[nn.Module, torch.Tensor]:
        from ..models import create, get_spec

        torch.manual_seed(0)
        spec = get_spec(name)
        model = create(name, equivariant=equivariant)
        return model, torch.randn(32, *spec.input_shape)

    return build


def _certify_subject(name: str) -> Callable[[], tuple[nn.Module, torch.Tensor]]:
    def build() -> tuple[nn.Module, torch.Tensor]:
        from ..models import create, get_spec

        torch.manual_seed(0)
        return create(name), torch.randn(2, *get_spec(name).input_shape)

    return build


def bench_cases() -> dict[str, BenchCase]:
    """Every case of ``groupattn bench``, by name (a fresh dictionary)."""
    from ..models import get_spec, list_models

    cases: dict[str, BenchCase] = {}
    layers = {
        "lifting_global": ("lifting", None, 8),
        "lifting_local5": ("lifting", 5, 8),
        "group_local5": ("group", 5, 8),
        "group_global_b1": ("group", None, 1),
    }
    for width, label in (
        (3, "narrow heads, 9 × 3 channels"),
        (20, "the reference's width, 9 × 20 channels"),
    ):
        for layer, (kind, hood, batch) in layers.items():
            name = f"gsa_{layer}_w{width}"
            cases[name] = BenchCase(
                name=name,
                description=f"{kind} self-attention, {'global' if hood is None else f'local {hood}×{hood}'}, p4, "
                f"28×28, batch {batch}, {label}",
                reference="the published GSA-Nets layer at 9 × 20 channels (fixed figures, same machine kind)",
                subject=_gsa_layer(kind, hood, batch, width),
                published=PUBLISHED_GSA[layer],
                groups=("gsa",),
            )
    cases["orbital_bias"] = BenchCase(
        name="orbital_bias",
        description="GlobalSelfAttention with its orbital (circulant) bias, 1024 tokens (32×32 torus), "
        "4 heads × 64 channels, batch 8",
        reference="the same projections and plain scaled_dot_product_attention on the same tokens, no bias",
        subject=_orbital_bias,
        baseline=_plain_attention,
        groups=("attention",),
    )
    cases["anchoring"] = BenchCase(
        name="anchoring",
        description="adaptive polyphase downsampling (anchoring), stride 2, 32 × 64 × 32 × 32 images",
        reference="a strided subsample x[..., ::2, ::2] (copied)",
        subject=lambda: (_Anchored(), _images()),
        baseline=lambda: (_Strided(), _images()),
        groups=("attention",),
    )
    for model in list_models():
        cases[f"model_{model}"] = BenchCase(
            name=f"model_{model}",
            description=f"registry {model} ({get_spec(model).group}), batch 32, its preset input",
            reference=f"its non-equivariant baseline ({model} --baseline)",
            subject=_model(model, True),
            baseline=_model(model, False),
            flops=True,
            groups=("models",),
        )
        cases[f"certify_{model}"] = BenchCase(
            name=f"certify_{model}",
            description=f"groupattn.check.certify of registry {model} under {get_spec(model).group}, batch 2",
            reference="one forward pass of the same model on the same input",
            subject=_certify_subject(model),
            certify_group=get_spec(model).group,
            groups=("certify",),
        )
    return cases


# ---------------------------------------------------------------------------- measuring
def _status_mib(field: str) -> float | None:
    """A memory field of ``/proc/self/status`` (``VmHWM``, ``VmRSS``) in MiB, if readable."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _reset_high_water() -> bool:
    """Reset the process's resident high-water mark (Linux ``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _release_freed_memory() -> None:
    """Return freed heap memory to the system (glibc ``malloc_trim``), so that a step's
    allocations raise the resident set instead of reusing pages freed earlier."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _peak_of(step: Callable[[], Any]) -> float | None:
    """Resident-memory peak of ``step()`` above the level before it (MiB)."""
    _release_freed_memory()
    if not _reset_high_water():
        return None
    before = _status_mib("VmRSS")
    step()
    peak = _status_mib("VmHWM")
    return None if peak is None or before is None else max(0.0, peak - before)


def best_time(step: Callable[[], Any], repeats: int, budget_s: float = 2.0) -> float:
    """Best of at least ``repeats`` runs after one warm-up, more (up to 50) while they
    fit in ``budget_s`` seconds (as ``timeit``'s autorange does)."""
    times: list[float] = []
    while len(times) <= repeats or (sum(times[1:]) < budget_s and len(times) <= 50):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def interleaved_best_times(
    first: Callable[[], Any], second: Callable[[], Any], repeats: int, budget_s: float = 4.0
) -> tuple[float, float]:
    """Best times of two steps timed in alternation (one warm-up each, then at least
    ``repeats`` rounds, more up to 50 while they fit in ``budget_s``): a machine that
    gets busier or quieter during the measurement affects both sides alike."""
    first()
    second()
    a: list[float] = []
    b: list[float] = []
    while len(a) < repeats or (sum(a) + sum(b) < budget_s and len(a) < 50):
        for step, times in ((first, a), (second, b)):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    return min(a), min(b)


def _steps(module: nn.Module, x: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], Any]]:
    def forward() -> None:
        module.eval()
        with torch.no_grad():
            module(x)

    trainable = any(p.requires_grad for p in module.parameters())
    source = x if trainable else x.detach().requires_grad_(True)

    def train_step() -> None:
        module.train()
        module.zero_grad(set_to_none=True)
        source.grad = None
        out = module(source)
        (out.float().square().mean()).backward()

    return forward, train_step


class _CountFlops(TorchDispatchMode):
    """Adds up the arithmetic of every operator PyTorch's flop counter knows (matrix
    products, convolutions, attention) without tracking modules (``FlopCounterMode``'s
    module hooks refuse a module that returns a trainable leaf, e.g. a bias table)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils.flop_counter import flop_registry

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            self.total += int(count(*args, **kwargs, out_val=out))
        return out


def _flops(module: nn.Module, x: torch.Tensor, training: bool) -> float:
    counter = _CountFlops()
    with counter:
        if training:
            module.train()
            module(x).float().square().mean().backward()
            module.zero_grad(set_to_none=True)
        else:
            module.eval()
            with torch.no_grad():
                module(x)
    return float(counter.total)


def measure_side(
    build: Callable[[], tuple[nn.Module, torch.Tensor]], repeats: int, flops: bool
) -> Measurement:
    """Build one side of a case and measure its forward pass and training step."""
    module, x = build()
    forward, train_step = _steps(module, x)
    result = Measurement()
    result.peak_forward_mib = _peak_of(forward)
    result.peak_train_mib = _peak_of(train_step)
    result.forward_s = best_time(forward, repeats)
    result.train_s = best_time(train_step, repeats)
    if flops:
        result.flops_forward = _flops(module, x, training=False)
        result.flops_train = _flops(module, x, training=True)
    return result


def measure_pair(
    subject: Callable[[], tuple[nn.Module, torch.Tensor]],
    reference: Callable[[], tuple[nn.Module, torch.Tensor]],
    repeats: int,
    flops: bool,
) -> tuple[Measurement, Measurement]:
    """Both sides of a case in this process: peaks one after the other (each from a
    reset high-water mark), times interleaved."""
    sides = [subject(), reference()]
    steps = [_steps(module, x) for module, x in sides]
    results = [Measurement(), Measurement()]
    for (forward, train_step), result in zip(steps, results):
        result.peak_forward_mib = _peak_of(forward)
        result.peak_train_mib = _peak_of(train_step)
    results[0].forward_s, results[1].forward_s = interleaved_best_times(
        steps[0][0], steps[1][0], repeats
    )
    results[0].train_s, results[1].train_s = interleaved_best_times(
        steps[0][1], steps[1][1], repeats
    )
    if flops:
        for (module, x), result in zip(sides, results):
            result.flops_forward = _flops(module, x, training=False)
            result.flops_train = _flops(module, x, training=True)
    return results[0], results[1]


MIN_PEAK_MIB = 1.0
"""Peaks below this many MiB are within the resolution of the resident-set measurement
(allocator pages, reused buffers): their ratios are not reported."""


def _memory_ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a < MIN_PEAK_MIB or b < MIN_PEAK_MIB:
        return None
    return a / b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def run_bench_case(name: str, repeats: int = 3) -> dict[str, Any]:
    """Measure one case in this process and return its record (see ``groupattn bench``).

    ``ratios`` are subject ÷ reference: times (below 1: faster than the reference),
    peak memory (``None`` where a peak is below [`MIN_PEAK_MIB`][groupattn.bench.MIN_PEAK_MIB], the
    measurement's resolution), and — for models — arithmetic; ``speedup_*`` are the
    inverses of the time ratios. Both sides of a case are timed in alternation.
    """
    cases = bench_cases()
    if name not in cases:
        from .._errors import ConfigurationError

        raise ConfigurationError(
            f"groupattn bench: expected a case in {sorted(cases)}, got {name!r}"
        )
    case = cases[name]
    record: dict[str, Any] = {
        "case": name,
        "description": case.description,
        "reference": case.reference,
        "threads": torch.get_num_threads(),
    }
    if case.certify_group is not None:
        from ..check import certify

        group = case.certify_group
        module, x = case.subject()
        forward, _ = _steps(module, x)
        seconds = best_time(lambda: certify(module, x, group), max(1, repeats - 2), budget_s=0.0)
        certificate = certify(module, x, group)
        forward_s = best_time(forward, repeats)
        record["subject"] = {"certify_s": seconds, "status": str(certificate.status)}
        record["reference_side"] = {"forward_s": forward_s}
        record["ratios"] = {"time": seconds / forward_s}
        return record
    if case.published is not None:
        subject = measure_side(case.subject, repeats, case.flops)
        record["subject"] = subject.__dict__
        published = case.published
        reference = Measurement(
            forward_s=published["forward_s"],
            train_s=published["train_s"],
            peak_forward_mib=published["forward_gib"] * 1024.0,
            peak_train_mib=published["train_gib"] * 1024.0,
        )
    else:
        if case.baseline is None:
            raise ValueError(
                f"groupattn bench: case {name!r} has neither a baseline nor published figures"
            )
        subject, reference = measure_pair(case.subject, case.baseline, repeats, case.flops)
        record["subject"] = subject.__dict__
    record["reference_side"] = reference.__dict__
    ratios = {
        "time_forward": _ratio(subject.forward_s, reference.forward_s),
        "time_train": _ratio(subject.train_s, reference.train_s),
        "memory_forward": _memory_ratio(subject.peak_forward_mib, reference.peak_forward_mib),
        "memory_train": _memory_ratio(subject.peak_train_mib, reference.peak_train_mib),
    }
    if case.flops:
        ratios["flops_forward"] = _ratio(subject.flops_forward, reference.flops_forward)
        ratios["flops_train"] = _ratio(subject.flops_train, reference.flops_train)
    record["ratios"] = ratios
    record["speedup_forward"] = _ratio(1.0, ratios["time_forward"])
    record["speedup_train"] = _ratio(1.0, ratios["time_train"])
    return record
