"""How the Python layers name a value's type in a message: as the C binding does (its tp_name:
bool, numpy.bool, float), so that one mistake reads the same through the direct call, the torch
operator and MLX; and the RopePoolError they raise."""

from . import _ropepool


def type_name(value):
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def too_large_for_float64(name, value):
    """The message for an int past float64's range given for a number, in the C binding's words
    (keywords.c: its repr shortened to its head and its length)."""
    text = repr(value)
    text = text if len(text) <= 40 else f"{text[:16]}... ({len(text)} characters)"
    return f"{name} must be a finite number, got {text}, too large for a float64"


def out_of_range(name, value, lo, hi):
    """The message for an int outside the range a keyword's C field holds, in the C binding's
    words (keywords.c, rpy_integer)."""
    return f"{name} = {value} is out of range [{lo}, {hi}]"


def refusal(message, status="RP_ERR_INVALID_ARGUMENT"):
    """The RopePoolError a Python layer raises, carrying .status as the binding's refusals do."""
    error = _ropepool.RopePoolError(message)
    error.status = status
    return error
