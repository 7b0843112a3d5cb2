"""Attention: one kernel (``scaled_dot_product_attention``) and the equivariant attention layers."""

from ._kernel import attend

__all__ = ["attend"]
