"""The torch.nn side of backends/tests/suite/parity.rs.

For each case: build the torch.nn twin, load pipeline's weights (as written before the
passes) with load_state_dict(strict=True), run the same input in training mode and in
evaluation mode, and compare the outputs and the state after training (running
statistics, num_batches_tracked) with pipeline's, within 1e-5.

Usage: python parity.py cases.json    (prints one line a case; exit 1 on any mismatch)
"""

import json
import pathlib
import re
import sys

import torch
from safetensors.torch import load_file
from torch import nn

TOLERANCE = 1e-5

# The modules a twin may use besides torch.nn's (`Residual`, `Parallel`): the code block
# of docs/models.md that defines them, run as it is, so the page users copy from is what
# is tested.
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "models.md"
TWINS = re.search(r"```python\n(# twins.*?)```", DOCS.read_text(), re.S)
if TWINS is None:
    sys.exit(f"{DOCS} has no python block starting with `# twins`")
NAMESPACE = {"nn": nn, "torch": torch}
exec(TWINS.group(1), NAMESPACE)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        raise AssertionError(f"shape {tuple(a.shape)} vs pipeline's {tuple(b.shape)}")
    if a.numel() == 0:
        return 0.0
    return (a.double() - b.double()).abs().max().item()


def check(case: dict) -> list:
    problems = []
    model = eval(case["torch"], NAMESPACE)
    before = load_file(case["before"])
    model.load_state_dict(before, strict=True)
    io = load_file(case["io"])
    inputs = [io["x"]] + ([io["mask"]] if "mask" in io else [])
    if "train" in io:
        model.train()
        with torch.no_grad():
            y = model(*inputs)
        d = max_diff(y, io["train"])
        if d > TOLERANCE:
            problems.append(f"training output differs by {d:.3g}")
        after = load_file(case["after"])
        for name, value in model.state_dict().items():
            d = max_diff(value, after[name])
            if d > TOLERANCE:
                problems.append(f"`{name}` after training differs by {d:.3g}")
    model.eval()
    with torch.no_grad():
        y = model(*inputs)
    d = max_diff(y, io["eval"])
    if d > TOLERANCE:
        problems.append(f"evaluation output differs by {d:.3g}")
    return problems


def main() -> int:
    cases = json.load(open(sys.argv[1]))
    failed = 0
    for case in cases:
        try:
            problems = check(case)
        except Exception as e:  # a load or shape failure is a mismatch too
            problems = [f"{type(e).__name__}: {e}"]
        if problems:
            failed += 1
            print(f"FAILED {case['name']}: " + "; ".join(problems))
        else:
            print(f"ok {case['name']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
