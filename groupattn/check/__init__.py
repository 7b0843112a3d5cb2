"""groupattn.check."""
