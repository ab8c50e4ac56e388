"""Small modules, one pattern each, as they appear in real model code.

Some trace with plain torch.fx, some fail (each at its own line), and two trace silently with
the branch taken for the example inputs baked in.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn


# fxls: init(dim=16, tasks=("cls", "box", "mask"))
# fxls: x = (B=2, 16)
class MultiTaskHeads(nn.Module):
    """A shared trunk with one head per task, returning a dict of outputs."""

    def __init__(self, dim: int, tasks: tuple[str, ...]) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU())
        self.heads = nn.ModuleDict(
            {name: nn.Linear(2 * dim, i + 2) for i, name in enumerate(tasks)}
        )

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        features = self.trunk(x)
        return {name: head(features) for name, head in self.heads.items()}


# fxls: init(dim=16)
# fxls: x = (B=2, T=5, 16)
class LambdaActivation(nn.Module):
    """An activation stored as a lambda on ``self`` (not a submodule)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.act = lambda x: x * torch.sigmoid(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.proj(x))


# fxls: init(dim=16)
# fxls: x = (B=2, T=5, 16)
class LengthNormalized(nn.Module):
    """Sums over the sequence and divides by its length, read with ``len``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        y = self.proj(x).transpose(0, 1)
        return y.sum(0) / len(y)  # fxls-expect: FX102


# fxls: init(ratio=0.5)
# fxls: x = (B=2, T=8, 16)
class TokenKeep(nn.Module):
    """Keeps the first ``ratio`` of the tokens; the count is computed with ``int``."""

    def __init__(self, ratio: float) -> None:
        super().__init__()
        self.ratio = ratio

    def forward(self, x: Tensor) -> Tensor:
        keep = int(x.size(1) * self.ratio)  # fxls-expect: FX104
        return x[:, :keep]


# fxls: init(dim=16)
# fxls: x = (B=2, T=5, 16)
class ZeroState(nn.Module):
    """Starts a recurrence from a zero state built with ``torch.zeros`` of traced sizes."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.zeros(x.size(0), x.size(2))  # fxls-expect: FX105
        return self.cell(x[:, 0], h)


# fxls: init(dim=16)
# fxls: x = (B=2, 16)
class RowWise(nn.Module):
    """Processes each row of the batch separately with a comprehension."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        rows = [self.proj(r) for r in x]  # fxls-expect: FX103
        return torch.stack(rows)


# fxls: init(dim=16)
# fxls: x = (B=2, 16)
class SignGate(nn.Module):
    """Branches on a tensor value."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.pos = nn.Linear(dim, dim)
        self.neg = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        if x.sum() > 0:  # fxls-expect: FX101
            return self.pos(x)
        return self.neg(x)


# fxls: init(dim=16)
# fxls: x = (B=2, 16)
class FeatureList(nn.Module):
    """Accepts one feature tensor or a list of them: the ``isinstance`` check is decided once
    while tracing."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor | list[Tensor]) -> Tensor:
        if isinstance(x, (list, tuple)):  # fxls-expect: FX108
            x = torch.cat(x, dim=-1)
        return self.proj(x)


# fxls: init(dim=16)
# fxls: x = (B=2, 16)
# fxls: bias = (16,)
class OptionalBias(nn.Module):
    """Adds a bias when one is given: the ``is None`` check of an optional tensor is correct
    code, decided the same way for every call that passes a tensor (no FX108)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor, bias: Optional[Tensor]) -> Tensor:
        y = self.proj(x)
        if bias is None:  # an optional tensor: correct code, no warning
            return y
        return y + bias
