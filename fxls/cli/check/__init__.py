"""``fxls check`` without its argument parsing: which files (discovery, ``.gitignore``),
``[tool.fxls]`` in pyproject.toml, the code filter, running files through one worker, the
summary and the progress line. Command-line side only: the language server never imports
this package."""
