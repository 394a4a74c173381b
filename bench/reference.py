"""The Python side of the benchmarks: the same workloads as bench/manifests/*.kdl, trained
with plain PyTorch (the fastest idiomatic loop, and the usual DataLoader loop), Lightning
and pytorch-accelerated. Prints one JSON object: seconds per epoch and test accuracy.

Every runner starts from the same initial weights as `pipeline` (written by harness.py),
trains on the same 60,000 samples with the same batch size, optimizer and thread count,
and accumulates the loss and accuracy every step, as `pipeline` does.
"""

import argparse
import json
import pathlib
import re
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

WORKLOADS = {
    "mlp": {"batch": 32, "train": 60_000},
    "cnn": {"batch": 256, "train": 60_000},
    "lstm": {"batch": 32, "train": 6_400},
    "transformer": {"batch": 32, "train": 6_400},
}
VOCABULARY = 1000


def twins():
    """The modules of docs/models.md that torch.nn lacks (PositionalEmbedding, LSTM with
    `output=`, SequencePool…), run from the page itself."""
    docs = pathlib.Path(__file__).resolve().parent.parent / "docs" / "models.md"
    code = re.search(r"```python\n(# twins.*?)```", docs.read_text(), re.S).group(1)
    namespace = {}
    exec(code, namespace)
    return namespace


class Tokens(nn.Embedding):
    """`embedding`: the data holds token ids as floats, as pipeline reads them."""

    def forward(self, x):
        return super().forward(x.long())


def build(workload):
    """The model, with parameter names matching pipeline's (its layer indices)."""
    if workload == "lstm":
        t = twins()
        return nn.Sequential(
            Tokens(VOCABULARY, 128),
            t["LSTM"](128, 128, num_layers=2, output="last"),
            nn.Linear(128, 10),
        )
    if workload == "transformer":
        t = twins()
        layer = nn.TransformerEncoderLayer(128, 4, 512, 0.0, batch_first=True)
        return nn.Sequential(
            Tokens(VOCABULARY, 128),
            t["PositionalEmbedding"](64, 128),
            nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
            t["SequencePool"]("mean"),
            nn.Linear(128, 10),
        )
    if workload == "mlp":
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 10),
    )


def read_safetensors(path):
    """A minimal safetensors reader (F32 only), so no extra package is needed."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    body = raw[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=np.float32).reshape(info["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out


def load(args):
    data = np.load(args.data)
    x = torch.from_numpy(data["x"])
    y = torch.from_numpy(data["y"])
    model = build(args.workload)
    model.load_state_dict(read_safetensors(args.init))
    n = WORKLOADS[args.workload]["train"]
    return model, x[:n], y[:n], x[n:], y[n:]


def accuracy(model, x, y, device):
    model.eval()
    with torch.no_grad():
        hits = sum((model(x[i : i + 1000].to(device)).argmax(1) == y[i : i + 1000].to(device)).sum().item() for i in range(0, len(x), 1000))
    return hits / len(x)


def plain(model, x, y, epochs, batch, device):
    """The fastest idiomatic loop: data on the device, batches by tensor indexing."""
    x, y = x.to(device), y.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        perm = torch.randperm(len(x), device=device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        hits = torch.zeros((), dtype=torch.int64, device=device)
        for i in range(0, len(x), batch):
            idx = perm[i : i + batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                loss_sum += loss.detach().double() * len(idx)
                hits += (out.argmax(1) == yb).sum()
        loss_sum.item()
        times.append(time.perf_counter() - start)
    return times


def dataloader(model, x, y, epochs, batch, device):
    """The usual loop: a TensorDataset behind a shuffling DataLoader."""
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        hits = torch.zeros((), dtype=torch.int64, device=device)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                loss_sum += loss.detach().double() * len(yb)
                hits += (out.argmax(1) == yb).sum()
        loss_sum.item()
        times.append(time.perf_counter() - start)
    return times


def lightning(model, x, y, epochs, batch, device):
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model

        def training_step(self, b, _):
            xb, yb = b
            out = self.net(xb)
            loss = F.cross_entropy(out, yb)
            self.log("train_loss", loss, on_epoch=True, on_step=False)
            self.log("train_acc", (out.argmax(1) == yb).float().mean(), on_epoch=True, on_step=False)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    times, starts = [], []

    class Timer(L.Callback):
        def on_train_epoch_start(self, *_):
            starts.append(time.perf_counter())

        def on_train_epoch_end(self, *_):
            times.append(time.perf_counter() - starts[-1])

    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Timer()],
    )
    trainer.fit(Module(), DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True))
    model.to(device)
    return times


def accelerated(model, x, y, epochs, batch, device):
    from pytorch_accelerated import Trainer
    from pytorch_accelerated.callbacks import MoveModulesToDeviceCallback, TerminateOnNaNCallback, TrainerCallback

    times, starts = [], []

    class Timer(TrainerCallback):
        def on_train_epoch_start(self, trainer, **kwargs):
            starts.append(time.perf_counter())

        def on_train_epoch_end(self, trainer, **kwargs):
            times.append(time.perf_counter() - starts[-1])

    trainer = Trainer(
        model=model,
        loss_func=nn.CrossEntropyLoss(),
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        callbacks=(MoveModulesToDeviceCallback, TerminateOnNaNCallback, Timer),
    )
    # Workers off, as for every other runner: on 2 cores they would compete with the math.
    trainer.train(
        train_dataset=TensorDataset(x, y),
        num_epochs=epochs,
        per_device_batch_size=batch,
        train_dataloader_kwargs={"num_workers": 0},
    )
    model.to(device)
    return times


RUNNERS = {"plain": plain, "dataloader": dataloader, "lightning": lightning, "accelerated": accelerated}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runner", choices=RUNNERS, required=True)
    p.add_argument("--workload", choices=WORKLOADS, required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--init", required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, help="another batch size than the workload's")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    model, x, y, xt, yt = load(args)
    model.to(device)
    batch = args.batch or WORKLOADS[args.workload]["batch"]
    times = RUNNERS[args.runner](model, x, y, args.epochs, batch, device)
    print(json.dumps({"epoch_seconds": times, "accuracy": accuracy(model, xt, yt, device)}))


if __name__ == "__main__":
    main()
