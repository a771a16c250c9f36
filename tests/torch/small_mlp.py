"""The small MLP that the training tests of the rtd backend share, and its
batches: the same start and the same data on every backend."""

import torch
import torch.nn as nn


def model(h, device):
    """Linear(h, h), ReLU, Linear(h, h), ReLU, Linear(h, 8), seeded alike each call."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                         nn.Linear(h, 8)).to(device)


def batch(step, micro, rank, h, device):
    """Rank's (inputs, targets) of micro-batch micro at step: 16 rows."""
    g = torch.Generator().manual_seed(1000 * step + 10 * micro + rank)
    x = torch.randn(16, h, generator=g)
    y = torch.randn(16, 8, generator=g)
    return x.to(device), y.to(device)
