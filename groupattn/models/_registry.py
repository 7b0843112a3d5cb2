"""The model registry: ``create(name, equivariant=True, **kwargs)`` and ``list_models()``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .._deprecation import translate_renamed

__all__ = ["ModelSpec", "create", "get_spec", "list_models", "register_model"]


@dataclass(frozen=True)
class ModelSpec:
    """A registered model family.

    Attributes
    ----------
    name
        Registry name, e.g. ``"vit"``.
    factory
        ``factory(equivariant: bool, **kwargs) -> nn.Module``.
    group
        The symmetry the equivariant variant has, as the checker's group name
        (``"translations"``, ``"p4"``, ``"p4m"``, ``"c4"``, ``"d4"``).
    input_shape
        Default input shape ``(C, H, W)`` of the tiny preset.
    description
        One line for listings.
    defaults
        Default keyword arguments of the tiny preset.
    learning_rate
        A peak AdamW learning rate that trains the tiny preset on the digits (what
        ``groupattn train`` uses when ``--lr`` is not given).
    warmup_epochs
        The linear learning-rate warm-up that trains the preset, in epochs (what
        ``groupattn train`` uses when ``--warmup-epochs`` is not given; see
        [`TrainConfig`][groupattn.training.TrainConfig]).
    """

    name: str
    factory: Callable[..., nn.Module]
    group: str
    input_shape: tuple[int, int, int] = (1, 32, 32)
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    learning_rate: float = 5e-3
    warmup_epochs: float = 0.0

    def training_settings(self) -> dict[str, float]:
        """``{"lr": ..., "warmup_epochs": ...}``: the preset's schedule, as keyword
        arguments of [`TrainConfig`][groupattn.training.TrainConfig]."""
        return {"lr": self.learning_rate, "warmup_epochs": self.warmup_epochs}


_MODELS: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    group: str,
    input_shape: tuple[int, int, int] = (1, 32, 32),
    description: str = "",
    learning_rate: float = 5e-3,
    warmup_epochs: float = 0.0,
    **defaults: Any,
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Register ``factory(equivariant: bool, **kwargs)`` under ``name`` (a decorator).

    ``learning_rate`` is the peak AdamW rate and ``warmup_epochs`` the warm-up that train
    the preset (see [`ModelSpec`][groupattn.models.ModelSpec]); ``defaults`` are keyword
    arguments of the preset.
    """

    def deco(factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in _MODELS:
            raise ValueError(
                f"register_model: expected a new model name, got {name!r}, which is taken"
            )
        _MODELS[name] = ModelSpec(
            name,
            factory,
            group,
            input_shape,
            description,
            dict(defaults),
            learning_rate,
            warmup_epochs,
        )
        return factory

    return deco


def _load_builtin() -> None:
    # Importing the package registers the built-in models.
    from .. import models  # noqa: F401


def get_spec(name: str) -> ModelSpec:
    """The [`ModelSpec`][groupattn.models.ModelSpec] registered under ``name``."""
    _load_builtin()
    if name not in _MODELS:
        raise KeyError(f"groupattn.models: expected one of {sorted(_MODELS)}, got {name!r}")
    return _MODELS[name]


def list_models() -> list[str]:
    """Names of all registered models, sorted."""
    _load_builtin()
    return sorted(_MODELS)


def create(name: str, equivariant: bool = True, **kwargs: Any) -> nn.Module:
    """Build the registered model ``name``.

    Parameters
    ----------
    name
        A name from [`list_models`][groupattn.models.list_models].
    equivariant
        ``True`` for the equivariant model, ``False`` for its ordinary baseline of the
        same size.
    kwargs
        Overrides of the tiny preset (widths, depths, heads, patch and window sizes …),
        under the model's argument names; a renamed argument's deprecated name is
        accepted too (with a ``DeprecationWarning``), so ``--model-arg heads=2`` and
        ``--model-arg num_heads=2`` both work.

    Raises
    ------
    ConfigurationError
        For an argument given under its new and its deprecated name at once.
    """
    spec = get_spec(name)
    renames = getattr(spec.factory, "__renamed_arguments__", {})
    if renames:  # old names first, so that they cannot slip past a preset's new ones
        kwargs = translate_renamed(renames, kwargs, f"groupattn.models.create({name!r})")
    options = {**spec.defaults, **kwargs}
    return spec.factory(equivariant=equivariant, **options)
