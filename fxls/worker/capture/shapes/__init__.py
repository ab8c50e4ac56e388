"""Shapes and dtypes of every node, without real memory, with the user's dimension names."""
