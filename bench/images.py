"""The torchvision side of the image-folder throughput benchmark: the usual PyTorch loop over
a folder of PNGs (torchvision's ImageFolder behind a shuffling DataLoader with worker
processes), decoding and augmenting every image every epoch.

It trains a small CNN on ALL the images under --root (no split; the benchmark measures
throughput, not generalisation), with

    ImageFolder(root, transform=Compose([Grayscale(1), RandomCrop(8, padding=1),
                                         ToTensor(), Normalize((0.5,), (0.5,))]))
    DataLoader(batch_size, shuffle=True, num_workers=workers, persistent_workers=True)

AdamW (lr 3e-3, weight decay 1e-4) and cross-entropy, accumulating the loss and accuracy
every step as tensors and reading them once per epoch, as `pipeline` does.

Each epoch is timed with time.perf_counter from the first batch request (the DataLoader
iterator's creation) to after the last step has finished (the once-per-epoch read syncs
the device), so the first epoch includes the workers' start-up. Prints one JSON object:

    {"images": N, "epochs": [{"seconds", "images_per_s", "loss", "accuracy"}, ...],
     "steady_images_per_s": median images/s over epochs 2 … E (null with one epoch),
     "first_epoch_seconds": s}

Usage: python bench/images.py [--root examples/data/digits-png] [--epochs 6] [--batch 64]
       [--threads 1] [--workers 2] [--seed 0] [--device cpu]
"""

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

ROOT = Path(__file__).resolve().parent.parent


def build():
    """8×8 grey images to 10 class scores (examples/digits.kdl's CNN)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 128),
        nn.ReLU(),
        nn.Dropout(0.25),
        nn.Linear(128, 10),
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(ROOT / "examples" / "data" / "digits-png"))
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    if args.epochs < 1:
        p.error("--epochs must be at least 1")

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    transform = transforms.Compose(
        [
            transforms.Grayscale(1),
            transforms.RandomCrop(8, padding=1),
            transforms.ToTensor(),
            transforms.Normalize((0.5,), (0.5,)),
        ]
    )
    dataset = datasets.ImageFolder(args.root, transform=transform)
    loader = DataLoader(
        dataset,
        batch_size=args.batch,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=device.type == "cuda",
        generator=torch.Generator().manual_seed(args.seed),
    )

    model = build().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    n = len(dataset)
    epochs = []
    for _ in range(args.epochs):
        model.train()
        # [summed loss, correct predictions], accumulated on the device every step.
        totals = torch.zeros(2, dtype=torch.float64, device=device)
        start = time.perf_counter()
        for xb, yb in loader:
            xb = xb.to(device, non_blocking=True)
            yb = yb.to(device, non_blocking=True)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                totals += torch.stack([loss.detach().double() * len(yb), (out.argmax(1) == yb).sum().double()])
        loss_sum, hits = totals.tolist()  # the epoch's one read: waits for the last step
        seconds = time.perf_counter() - start
        epochs.append(
            {
                "seconds": seconds,
                "images_per_s": n / seconds,
                "loss": loss_sum / n,
                "accuracy": hits / n,
            }
        )

    steady = [e["images_per_s"] for e in epochs[1:]]
    print(
        json.dumps(
            {
                "images": n,
                "epochs": epochs,
                "steady_images_per_s": statistics.median(steady) if steady else None,
                "first_epoch_seconds": epochs[0]["seconds"],
            }
        )
    )


if __name__ == "__main__":
    main()
