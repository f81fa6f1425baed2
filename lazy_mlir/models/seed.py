"""The models of the seed documents, as users bring them.

``MnistCNN`` is the LTC tutorial's network, ``LeNet5`` Ratex's bias-free
LeNet-5, ``MLP`` a plain multi-layer perceptron; ``digits`` loads
scikit-learn's bundled handwritten digits upscaled to MNIST's 28x28.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MnistCNN(nn.Module):
    """PyTorch's LTC tutorial network (conv-conv-pool-dropout-fc-fc)."""

    def __init__(self, dropout: bool = True):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25 if dropout else 0.0)
        self.dropout2 = nn.Dropout(0.5 if dropout else 0.0)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class LeNet5(nn.Module):
    """Ratex's LeNet-5: bias-free padded convs, average pooling, three linears."""

    def __init__(self, input_shape: int = 28, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5, padding=2, bias=False)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5, bias=False)
        self.linear1 = nn.Linear(((input_shape // 2 - 4) // 2) ** 2 * 16, 120)
        self.linear2 = nn.Linear(120, 84)
        self.linear3 = nn.Linear(84, num_classes)

    def forward(self, x):
        out = F.avg_pool2d(torch.relu(self.conv1(x)), (2, 2), (2, 2))
        out = F.avg_pool2d(torch.relu(self.conv2(out)), (2, 2), (2, 2))
        out = torch.flatten(out, 1)
        return self.linear3(self.linear2(self.linear1(out)))


class MLP(nn.Module):
    def __init__(self, sizes=(784, 1024, 1024, 10)):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(torch.flatten(x, 1))


def digits(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's 8x8 handwritten digits, upscaled to 1x28x28 and
    normalized like MNIST; returns (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    x = (x - 0.1307) / 0.3081
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(y), generator=g)
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]
