"""Models from the literature, each with its non-equivariant baseline behind ``equivariant=False``."""

from ._registry import ModelSpec, create, get_spec, list_models, register_model

__all__ = ["ModelSpec", "create", "get_spec", "list_models", "register_model"]
