"""groupattn.nn."""
