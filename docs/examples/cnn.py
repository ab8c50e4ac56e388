"""A small convolutional classifier for 32x32 RGB images (CIFAR-10 sized)."""

import torch
import torch.nn.functional as F
from torch import nn


# fxls: x = (B=8, 3, 32, 32)
class SmallCNN(nn.Module):
    """Two conv blocks, global pooling and a linear classifier."""

    def __init__(self, num_classes: int = 10, width: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width * 2, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(width * 2)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.1)
        self.fc = nn.Linear(width * 2, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        x = self.dropout(x)
        return self.fc(x)


if __name__ == "__main__":
    model = SmallCNN()
    print(model(torch.randn(8, 3, 32, 32)).shape)
