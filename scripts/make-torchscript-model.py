"""Writes the TorchScript model of examples/torchscript.kdl: digits-cnn.pt.

The module is the twin of examples/digits.kdl's native model (the same layers in the same
order, so the same state-dict names and sizes), written as a plain `nn.Module` with its
own `forward` and scripted: what a user brings from a PyTorch code base. pipeline trains
it from the weights PyTorch initialised here (seeded), so the file alone decides the
starting point.

Usage: python make-torchscript-model.py OUT.pt   (deterministic: seeded)
"""

import os
import sys

import torch
from torch import nn


class DigitsCNN(nn.Module):
    """8×8 grey digits, given as 64 pixel values per sample, to 10 class scores."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 32, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm2d(32)
        self.hidden = nn.Linear(32 * 4 * 4, 128)
        self.dropout = nn.Dropout(0.25)
        self.out = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, 1, 8, 8)
        x = torch.relu(self.norm(self.conv(x)))
        x = nn.functional.max_pool2d(x, 2).flatten(1)
        x = self.dropout(torch.relu(self.hidden(x)))
        return self.out(x)


def main(out: str) -> None:
    torch.manual_seed(0)
    module = torch.jit.script(DigitsCNN())
    tmp = out + ".tmp"
    module.save(tmp)
    os.replace(tmp, out)


if __name__ == "__main__":
    main(sys.argv[1])
