"""groupattn.positional."""
