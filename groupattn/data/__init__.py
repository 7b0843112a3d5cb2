"""The bundled real dataset (scikit-learn's handwritten digits) and its shifted / rotated variants."""

from ._digits import DigitsSplit, load_digits, random_shifts, rotate_quarter_turns

__all__ = ["DigitsSplit", "load_digits", "random_shifts", "rotate_quarter_turns"]
