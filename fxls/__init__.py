"""fxls: a language server for PyTorch built on torch.fx."""

__version__ = "0.1.0"
