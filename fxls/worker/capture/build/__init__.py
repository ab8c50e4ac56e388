"""Building module instances: recipes and guesses (construct), meta/CPU builds (instances),
instances a parent builds and calls (parents), example inputs for ``forward`` (inputs)."""
