#!/usr/bin/env python3
"""typeflow's files read by readers that are not typeflow's, on the GPU machine
(it has Python packages Debian lacks). The files come from
bench/gpu/readers_fixture.cpp, which bench/gpu/bundle.sh runs and packs:

    python3 bench/gpu/readers.py DIR

- TensorBoard's own reader (EventAccumulator) over DIR/logs: the epoch
  scalars equal fit's History (DIR/history.json) in float32, and every
  kernel's histogram is there.
- transformers' GPT2LMHeadModel.from_pretrained(DIR/gpt2): its logits on the
  same ids equal typeflow's (DIR/gpt2_logits.json).

Prints one line per reader and exits 1 if either disagrees.
"""

import json
import math
import struct
import sys
from pathlib import Path


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def tensorboard(dir: Path) -> bool:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    history = json.loads((dir / "history.json").read_text())
    problems = []
    counts = {}
    for split, prefix in (("train", ""), ("validation", "val_")):
        acc = EventAccumulator(str(dir / "logs" / split), size_guidance={"scalars": 0, "histograms": 0})
        acc.Reload()
        tags = acc.Tags()
        counts[split] = (len(tags["scalars"]), len(tags["histograms"]))
        for name in ("loss", "accuracy"):
            tag = "epoch_" + name
            if tag not in tags["scalars"]:
                problems.append(f"{split}: no scalar {tag} (has {sorted(tags['scalars'])})")
                continue
            got = [(e.step, e.value) for e in acc.Scalars(tag)]
            want = [(step, f32(v)) for step, v in enumerate(history[prefix + name])]
            if got != want:
                problems.append(f"{split} {tag}: read {got}, History says {want}")
        if split == "train" and not any(t.endswith("kernel") for t in tags["histograms"]):
            problems.append(f"train: no kernel histogram (has {sorted(tags['histograms'])})")
    ok = not problems
    print(f"tensorboard EventAccumulator: {'ok' if ok else 'DISAGREES'}; (scalar tags, histogram tags) "
          f"train {counts.get('train')}, validation {counts.get('validation')}" +
          ("".join("\n  " + p for p in problems)))
    return ok


def transformers_gpt2(dir: Path) -> bool:
    import torch
    import transformers

    expected = json.loads((dir / "gpt2_logits.json").read_text())
    batch, steps, vocab = expected["batch"], expected["steps"], expected["vocab"]
    model = transformers.GPT2LMHeadModel.from_pretrained(str(dir / "gpt2")).eval()
    ids = torch.tensor(expected["ids"], dtype=torch.long).reshape(batch, steps)
    with torch.no_grad():
        logits = model(ids).logits.double()
    want = torch.tensor(expected["logits"], dtype=torch.float64).reshape(batch, steps, vocab)
    error = (logits - want).norm().item() / want.norm().item()
    worst = (logits - want).abs().max().item()
    ok = math.isfinite(error) and error < 1e-5
    print(f"transformers {transformers.__version__} GPT2LMHeadModel.from_pretrained: "
          f"{'ok' if ok else 'DISAGREES'}; logits against typeflow's: relative error {error:.2e}, "
          f"largest difference {worst:.2e} over {want.numel()} values")
    return ok


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    dir = Path(sys.argv[1])
    results = []
    for reader in (tensorboard, transformers_gpt2):
        try:
            results.append(reader(dir))
        except Exception as e:  # a reader that cannot run says why; the other still runs
            print(f"{reader.__name__}: FAILED to run: {type(e).__name__}: {e}")
            results.append(False)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
