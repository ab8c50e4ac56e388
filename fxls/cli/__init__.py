"""The command line: ``fxls serve``, ``fxls check`` and ``fxls graph``."""
