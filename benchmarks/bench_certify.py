"""Time ``certify`` on a 12-block ViT (target: at most 2 s).

Wall-clock figures on a shared machine are noisy, so the script also reports the ratio
to one forward pass of the same model measured in the same process.

Run: ``.venv/bin/python benchmarks/bench_certify.py``.
"""

from __future__ import annotations

import time

import torch

from groupattn.check import certify
from groupattn.models import create, get_spec


class TorchBlock(torch.nn.Module):
    """A pre-norm transformer block from plain torch pieces (traced op by op)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = (
            self.qkv(self.norm1(x))
            .reshape(b, n, 3, self.heads, c // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class TorchViT(torch.nn.Module):
    def __init__(self, depth: int = 12, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = torch.nn.Conv2d(1, dim, 1)
        self.blocks = torch.nn.Sequential(*[TorchBlock(dim, heads) for _ in range(depth)])
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        return self.head(self.blocks(tokens).mean(dim=1))


def best_of(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def cpu_of(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    """Best process CPU time (less sensitive to other jobs on a shared machine than wall time)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = get_spec("vit")
    model = create("vit", depth=12).eval()
    x = torch.randn(2, *spec.input_shape)
    cert = certify(model, x, spec.group)
    with torch.no_grad():
        forward = best_of(lambda: model(x))
    certify_time = best_of(lambda: certify(model, x, spec.group))
    verify_time = best_of(lambda: certify(model, x, spec.group, verify=True), repeats=2)
    print(
        f"model: vit depth=12, input {tuple(x.shape)}, group {spec.group}: verdict {cert.verdict.value}, "
        f"{len(cert.records)} nodes"
    )
    print(f"forward pass:              {forward * 1e3:8.2f} ms")
    certify_cpu = cpu_of(lambda: certify(model, x, spec.group))
    print(
        f"certify:                   {certify_time * 1e3:8.2f} ms  ({certify_time / forward:.1f}x a forward pass)"
    )
    print(f"certify, CPU time:         {certify_cpu * 1e3:8.2f} ms")
    print(
        f"certify(..., verify=True): {verify_time * 1e3:8.2f} ms  ({verify_time / forward:.1f}x a forward pass)"
    )
    print(
        "target: certify <= 2 s:",
        "met" if certify_time <= 2.0 else "NOT met",
        "(wall);",
        "met" if certify_cpu <= 2.0 else "NOT met",
        "(CPU)",
    )
    flat = TorchViT().eval()
    xf = torch.randn(2, 1, 8, 8)
    cert = certify(flat, xf, "translations")
    with torch.no_grad():
        flat_forward = best_of(lambda: flat(xf))
    flat_time = best_of(lambda: certify(flat, xf, "translations"), repeats=3)
    print(
        f"torch-only 12-block transformer traced op by op ({len(cert.records)} nodes, verdict {cert.verdict.value}): "
        f"certify {flat_time * 1e3:.1f} ms ({flat_time / flat_forward:.1f}x a forward pass of {flat_forward * 1e3:.2f} ms)"
    )


if __name__ == "__main__":
    main()
