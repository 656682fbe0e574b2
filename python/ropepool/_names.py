"""How the Python layers name a value's type in a message: as the C binding does (its tp_name:
bool, numpy.bool, float), so that one mistake reads the same through the direct call, the torch
operator and MLX."""


def type_name(value):
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
