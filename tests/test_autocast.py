"""bf16 autocast: every registry model's forward pass and training step (#15).

Under ``torch.autocast(device, dtype=torch.bfloat16)`` every registry model (equivariant
and baseline) accepts float32 and bf16 images, gives finite logits close to its float32
ones (bf16 keeps 8 mantissa bits: a few percent of the logits' scale), and trains: the
loss is finite, every gradient is float32 (the parameters' dtype) and finite, and an
optimizer step changes the weights. The canonicalizers' decisions are taken in float64
outside autocast, so an anchored model picks the same frame as in float32.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from groupattn.canonical import record_canonicalizations
from groupattn.models import create, get_spec, list_models
from groupattn.testing import relative_error, seed_everything

#: "cuda" only where a GPU is present (no skip marks: the list is built conditionally).
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]

MODELS = [(name, eq) for name in list_models() for eq in (True, False)]
MODEL_IDS = [f"{name}-{'equivariant' if eq else 'baseline'}" for name, eq in MODELS]

#: Largest relative difference (to the largest float32 logit) of bf16-autocast logits.
BF16_LOGIT_TOLERANCE = 0.1


def _model(name: str, equivariant: bool, device: str) -> nn.Module:
    seed_everything(0)
    return create(name, equivariant=equivariant).to(device)


def _images(name: str, device: str, batch: int = 4) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch, *get_spec(name).input_shape, generator=generator).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("input_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("name", "equivariant"), MODELS, ids=MODEL_IDS)
def test_forward_under_bf16_autocast(
    name: str, equivariant: bool, input_dtype: torch.dtype, device: str
) -> None:
    model = _model(name, equivariant, device).eval()
    # the float32 reference sees the same (rounded) image: a bf16 image is other data, on
    # which an anchor may legitimately pick another phase where float32's margin is small
    x = _images(name, device).to(input_dtype)
    with torch.no_grad():
        reference = model(x.float())
        with torch.autocast(device, dtype=torch.bfloat16), record_canonicalizations() as rec:
            logits = model(x)
    assert logits.shape == reference.shape
    assert logits.dtype in (torch.bfloat16, torch.float32)
    assert bool(torch.isfinite(logits.float()).all())
    error = relative_error(logits.float(), reference)
    assert error <= BF16_LOGIT_TOLERANCE, f"{name}: bf16 logits off by {error:.3g} of their scale"
    for event in rec.events:  # decisions in float64, whatever the network runs in
        assert event.margin.dtype == torch.float64


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "equivariant"), MODELS, ids=MODEL_IDS)
def test_training_step_under_bf16_autocast(name: str, equivariant: bool, device: str) -> None:
    model = _model(name, equivariant, device).train()
    x = _images(name, device)
    labels = torch.arange(x.shape[0], device=device) % 10
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, labels)
    assert loss.dtype == torch.float32 and bool(torch.isfinite(loss))
    loss.backward()
    for param_name, param in model.named_parameters():
        assert param.grad is not None, f"{name}: no gradient for {param_name}"
        assert param.grad.dtype == torch.float32, f"{name}: {param_name} grad {param.grad.dtype}"
        assert bool(torch.isfinite(param.grad).all()), f"{name}: {param_name} grad not finite"
    optimizer.step()
    assert any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list_models())
def test_anchoring_decisions_do_not_depend_on_autocast(name: str, device: str) -> None:
    model = _model(name, True, device).eval()
    x = _images(name, device)
    with torch.no_grad(), record_canonicalizations() as full:
        model(x)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        with record_canonicalizations() as low:
            model(x)
    assert len(full.events) == len(low.events)
    for a, b in zip(full.events, low.events):
        assert a.scores is not None and b.scores is not None
        torch.testing.assert_close(a.scores, b.scores, rtol=0.0, atol=0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_vit_under_bf16_autocast_matches_eager(device: str) -> None:
    torch._dynamo.reset()
    model = _model("vit", True, device).eval()
    x = _images("vit", device)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        eager, traced = model(x), compiled(x)
    assert traced.dtype == eager.dtype
    error = relative_error(traced.float(), eager.float())
    assert error <= 2e-2, f"compiled bf16 logits off by {error:.3g} of their scale"
