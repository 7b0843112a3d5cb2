"""groupattn.interop."""
