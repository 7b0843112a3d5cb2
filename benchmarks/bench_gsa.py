"""Benchmark of lifting and group self-attention against the published GSA-Nets figures.

Setting (GSA-Nets, Romero & Cordonnier 2021, their benchmark on a CPU machine): p4,
28×28 input, batch 8, 1→20 channels for lifting and 20→20 for group layers, 9 heads,
2 threads. Cases: lifting global, lifting local 5×5, group local 5×5, group global at
batch 1 and batch 8.

Method
------
Every case runs in its own Python process (``subprocess``), so peak memory is not
polluted by other cases. Peak memory is ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
(the process's resident high-water mark) minus its value right after the imports and
the input allocation; it therefore includes the layer, the once-per-shape geometry
(cached gather index) and every temporary. The forward peak is read after the timed
forward passes (under ``torch.no_grad()``), the forward+backward peak after the timed
training steps. Times are the best of at least ``--repeats`` runs after one warm-up
(more, up to 50, while they fit in about two seconds: fast cases get more chances at a
quiet moment of a shared machine).

Head width: the heads split the channels (``head_channels = ceil(20 / 9) = 3``, 27
attention channels in total), the usual multi-head convention; GSA-Nets gives every
head the full width (9 × 20 = 180 attention channels). ``--head-channels 20`` runs
their width.

Kernels: local lifting layers with an additive positional bias use the factorised
kernel (:func:`groupattn.attention.attend_shared_query_windows`: content weights once
per pixel, one small matrix product for all output slices); everything else, and
lifting with ``--query-position`` (GSA-Nets' content × position term), runs on
``scaled_dot_product_attention``.

Global attention with a trainable bias (``--global-bias``): ``GlobalSelfAttention(256, 4,
(32, 32))``, batch 8, with the circulant (orbital) bias and without, timed interleaved in
one process (each round runs every variant once; best time per variant; ratios are medians
of same-round ratios, robust on a shared machine). The bias variant runs twice: with the
attention implementation forced to ``"sdpa"`` (the behaviour before the entry point
chose: SDPA with a grad-requiring mask takes its unfused math path in training) and on
``"auto"`` (the chunked backward; see ``groupattn.attention.choose_implementation``).

Usage: ``python benchmarks/bench_gsa.py`` (all cases), ``--case NAME`` or ``--global-bias``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable

PUBLISHED = {  # forward seconds, peak GiB (None: out of memory)
    "lifting_global": (4.6, 3.5),
    "lifting_local5": (0.22, 0.35),
    "group_local5": (2.4, 1.5),
    "group_global_b1": (6.4, 5.0),
    "group_global_b8": (None, None),
}
CASES = {
    "lifting_global": ("lifting", None, 8),
    "lifting_local5": ("lifting", 5, 8),
    "group_local5": ("group", 5, 8),
    "group_global_b1": ("group", None, 1),
    "group_global_b8": ("group", None, 8),
}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_case(
    name: str, head_channels: int, repeats: int, threads: int, query_position: bool = False
) -> dict[str, float | str]:
    import torch

    from groupattn.attention import GroupSelfAttention, LiftingSelfAttention
    from groupattn.bench import best_time

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    kind, neighbourhood, batch = CASES[name]
    size, channels, heads = 28, 20, 9
    if kind == "lifting":
        x = torch.randn(batch, 1, size, size)
    else:
        x = torch.randn(batch, channels, 4, size, size)
    base = _peak_mib()
    layer_cls = LiftingSelfAttention if kind == "lifting" else GroupSelfAttention
    layer = layer_cls(
        x.shape[1],
        channels,
        "C4",
        num_heads=heads,
        head_dim=head_channels,
        neighbourhood=neighbourhood,
        query_position=query_position,
    )

    def best(step: Callable[[], object]) -> float:
        """Best time after one warm-up (see ``groupattn.bench.best_time``)."""
        return best_time(step, repeats)

    def forward() -> None:
        with torch.no_grad():
            layer(x)

    def train_step() -> None:
        layer.zero_grad(set_to_none=True)
        layer(x).square().mean().backward()

    layer.eval()
    t_fwd = best(forward)
    peak_fwd = _peak_mib() - base
    layer.train()
    t_train = best(train_step)
    peak_train = _peak_mib() - base
    return {
        "case": name,
        "forward_s": t_fwd,
        "forward_backward_s": t_train,
        "peak_forward_mib": peak_fwd,
        "peak_forward_backward_mib": peak_train,
    }


def global_bias_ratios(rounds: int, threads: int, batch: int = 8) -> dict[str, float]:
    """Forward and training times of global attention with the circulant bias, on "sdpa" and
    "auto", against the same layer without bias; interleaved rounds (see the module docstring)."""
    import statistics

    import torch

    from groupattn.attention import GlobalSelfAttention, attention_implementation

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.randn(batch, 32 * 32, 256)
    plain = GlobalSelfAttention(256, 4, (32, 32), bias=None)
    biased = GlobalSelfAttention(256, 4, (32, 32), bias="circulant")
    variants = {
        "no_bias": (plain, "auto"),
        "bias_sdpa": (biased, "sdpa"),
        "bias_auto": (biased, "auto"),
    }

    def forward(layer: object) -> None:
        with torch.no_grad():
            layer(x)  # type: ignore[operator]

    def train(layer: object) -> None:
        layer.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
        layer(x).square().mean().backward()  # type: ignore[operator]

    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds + 1):  # the first round warms up
        for step_name, step in (("forward", forward), ("train", train)):
            for name, (layer, implementation) in variants.items():
                with attention_implementation(implementation):
                    start = time.perf_counter()
                    step(layer)
                    times.setdefault((step_name, name), []).append(time.perf_counter() - start)
    result: dict[str, float] = {}
    for step_name in ("forward", "train"):
        base = times[(step_name, "no_bias")][1:]
        result[f"{step_name}_no_bias_s"] = min(base)
        for name in ("bias_sdpa", "bias_auto"):
            own = times[(step_name, name)][1:]
            result[f"{step_name}_{name}_s"] = min(own)
            result[f"{step_name}_{name}_ratio"] = statistics.median(
                a / b for a, b in zip(own, base)
            )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--head-channels", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--query-position", action="store_true", help="add the content x position term"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--global-bias",
        action="store_true",
        help="GlobalSelfAttention with the circulant bias vs without, on 'sdpa' and 'auto' (one process)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --global-bias")
    args = parser.parse_args()
    if args.global_bias:
        r = global_bias_ratios(args.rounds, args.threads)
        print(
            f"GlobalSelfAttention(256, 4, (32, 32)), batch 8, {args.threads} threads, {args.rounds} rounds; "
            "ratio = with circulant bias / without (median of same-round ratios)"
        )
        for step in ("forward", "train"):
            print(f"{step:8s} no bias {r[f'{step}_no_bias_s']:.3f} s")
            for name, label in (
                ("bias_sdpa", "bias, 'sdpa' (before)"),
                ("bias_auto", "bias, 'auto' (after)"),
            ):
                print(
                    f"{'':8s} {label:22s} {r[f'{step}_{name}_s']:.3f} s  ratio {r[f'{step}_{name}_ratio']:.2f}x"
                )
        return
    if args.case:
        print(
            json.dumps(
                run_case(
                    args.case, args.head_channels, args.repeats, args.threads, args.query_position
                )
            )
        )
        return
    term = ", content x position term" if args.query_position else ""
    print(
        f"p4, 28x28, 9 heads x {args.head_channels} channels{term}, {args.threads} threads; one process per case"
    )
    header = (
        f"{'case':18s} {'fwd s':>8s} {'fwd+bwd s':>10s} {'peak fwd MiB':>13s} {'peak f+b MiB':>13s}"
    )
    print(header + f" {'speed-up':>9s} {'mem ratio':>10s}")
    for name in CASES:
        cmd = [sys.executable, __file__, "--case", name, "--head-channels", str(args.head_channels)]
        cmd += ["--repeats", str(args.repeats), "--threads", str(args.threads)]
        cmd += ["--query-position"] if args.query_position else []
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{name:18s} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        pub_t, pub_m = PUBLISHED[name]
        speed = f"{pub_t / r['forward_s']:.1f}x" if pub_t else "pub. OOM"
        mem = f"{pub_m * 1024 / max(r['peak_forward_mib'], 1e-9):.1f}x" if pub_m else "pub. OOM"
        print(
            f"{name:18s} {r['forward_s']:8.3f} {r['forward_backward_s']:10.3f} {r['peak_forward_mib']:13.1f} "
            f"{r['peak_forward_backward_mib']:13.1f} {speed:>9s} {mem:>10s}"
        )


if __name__ == "__main__":
    main()
