"""FX nodes as wire data: targets, named arguments (``normalized_arguments`` for every node)."""
