"""groupattn: group-equivariant attention for PyTorch."""

__version__ = "0.1.0"
