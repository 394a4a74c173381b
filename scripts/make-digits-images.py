"""Writes the image-folder twin of scikit-learn's digits: digits-png/ and digits-png.csv.

Every row of examples/data/digits.csv.gz (as shipped in the scikit-learn wheel: 1797 rows
of 64 pixel values 0 … 16, row-major 8×8, then the label 0 … 9, no header) becomes an
8-bit greyscale 8×8 PNG, pixel = round(v * 255 / 16) (halves rounded up; only v = 8 has
one: 127.5 → 128), in torchvision's ImageFolder layout:

    OUT_DIR/<label>/<row index, 4 digits>.png        e.g. digits-png/3/0012.png

and a listing with a header `path,label` and one row per image in the file's row order,
each path relative to the listing's own directory (e.g. `digits-png/3/0012.png`).

The PNGs are written by Pillow with fixed settings and no metadata (no tIME, no text
chunks), so every run writes the same bytes (for a given Pillow and its zlib). The tree is
built in a temporary directory beside OUT_DIR and renamed into place, the listing written
to a temporary file and renamed: an interrupted run leaves no half-written output.

Usage: python make-digits-images.py OUT_DIR LISTING_CSV   (deterministic; reads
examples/data/digits.csv.gz next to this script's repository)
"""

import gzip
import io
import os
import shutil
import sys
import tempfile

import numpy as np
from PIL import Image

SIDE = 8
CLASSES = 10
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data", "digits.csv.gz")


def read_digits(path: str) -> tuple[np.ndarray, np.ndarray]:
    """The pixels (n, 8, 8) as uint8 0 … 255 and the labels (n,) as int."""
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
    if table.shape[1] != SIDE * SIDE + 1:
        raise SystemExit(f"{path}: expected {SIDE * SIDE + 1} columns, found {table.shape[1]}")
    values, labels = table[:, :-1], table[:, -1]
    if not (np.all(values == np.round(values)) and values.min() >= 0 and values.max() <= 16):
        raise SystemExit(f"{path}: pixel values must be integers 0 … 16")
    if not (np.all(labels == np.round(labels)) and labels.min() >= 0 and labels.max() < CLASSES):
        raise SystemExit(f"{path}: labels must be integers 0 … {CLASSES - 1}")
    v = values.astype(np.int64)
    # round(v * 255 / 16) in integers, halves up: floor((2 * 255 v + 16) / 32).
    pixels = ((2 * 255 * v + 16) // 32).astype(np.uint8).reshape(-1, SIDE, SIDE)
    return pixels, labels.astype(np.int64)


def png_bytes(image: np.ndarray) -> bytes:
    """One 8-bit greyscale PNG, the same bytes on every run (no metadata chunks)."""
    picture = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8))  # 2-D uint8: mode "L"
    assert picture.mode == "L" and picture.size == (SIDE, SIDE)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=False, compress_level=9)
    return buffer.getvalue()


def replace_dir(tmp: str, out: str) -> None:
    """Moves the finished tree `tmp` to `out`, replacing an older `out` if there is one."""
    if not os.path.lexists(out):
        os.rename(tmp, out)
        return
    old = tempfile.mkdtemp(prefix="." + os.path.basename(out) + ".old-", dir=os.path.dirname(out))
    os.rmdir(old)
    os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old)


def main(out_dir: str, listing: str) -> None:
    out_dir = os.path.abspath(out_dir)
    listing = os.path.abspath(listing)
    pixels, labels = read_digits(SOURCE)
    width = max(4, len(str(len(labels) - 1)))

    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(out_dir) + ".tmp-", dir=parent)
    try:
        os.chmod(tmp, 0o755)
        for label in range(CLASSES):
            os.mkdir(os.path.join(tmp, str(label)))
        rows = []
        for index, (image, label) in enumerate(zip(pixels, labels)):
            name = os.path.join(str(label), f"{index:0{width}d}.png")
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(png_bytes(image))
            path = os.path.relpath(os.path.join(out_dir, name), os.path.dirname(listing))
            rows.append(f"{path.replace(os.sep, '/')},{label}\n")
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    os.makedirs(os.path.dirname(listing), exist_ok=True)
    tmp_listing = listing + ".tmp"
    with open(tmp_listing, "w", newline="") as f:
        f.write("path,label\n")
        f.writelines(rows)
    os.replace(tmp_listing, listing)
    print(f"make-digits-images: wrote {len(rows)} images to {out_dir} and {listing}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("Usage: ")[1])
    main(sys.argv[1], sys.argv[2])
