"""Writes the synthetic sequence data set of examples/sequence-*.kdl: order.csv.

Each sample is 12 tokens. Three marker tokens (1, 2, 3) appear exactly once each, at
random places; the other places hold filler tokens (4 … 9). The label (0 … 5) is the
order in which the three markers appear, as the index of that permutation. Every sample
holds the same markers once, so the bag of its tokens says nothing of the label: a model
must read the order (chance is 1/6).

Usage: python make-order-data.py OUT.csv   (deterministic: seeded)
"""

import itertools
import os
import sys

import numpy as np

LENGTH = 12
SAMPLES = 6000
MARKERS = (1, 2, 3)
FILLERS = np.arange(4, 10)
ORDERS = list(itertools.permutations(MARKERS))


def main(out: str) -> None:
    rng = np.random.default_rng(12)
    rows = []
    for _ in range(SAMPLES):
        tokens = rng.choice(FILLERS, size=LENGTH)
        places = rng.choice(LENGTH, size=len(MARKERS), replace=False)
        order = tuple(rng.permutation(MARKERS))
        for place, marker in zip(sorted(places), order):
            tokens[place] = marker
        rows.append([*tokens.tolist(), ORDERS.index(order)])
    header = ",".join([f"t{i}" for i in range(LENGTH)] + ["order"])
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(header + "\n")
        for row in rows:
            f.write(",".join(map(str, row)) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main(sys.argv[1])
