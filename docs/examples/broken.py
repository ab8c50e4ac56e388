"""Two models with mistakes that fxls reports before anything runs."""

import torch
from torch import nn


# fxls: x = (B=4, 16)
class DataDependentGate(nn.Module):
    """torch.fx cannot trace a branch on a tensor's value (FX101)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return x


# fxls: x = (B=4, 3, 32, 32)
class WrongInFeatures(nn.Module):
    """The classifier expects 3*32*32 = 3072 features but gets 16*16*16 = 4096 (FX201)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1)
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = x.flatten(1)
        return self.fc(x)


if __name__ == "__main__":
    print(DataDependentGate()(torch.randn(4, 16)).shape)
    WrongInFeatures()(torch.randn(4, 3, 32, 32))  # raises: mat1 and mat2 shapes cannot be multiplied
