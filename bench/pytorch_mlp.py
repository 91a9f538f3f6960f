#!/usr/bin/env python3
"""The training step of bench/train_step_bench.cpp, in PyTorch, for comparison.

    python3 bench/pytorch_mlp.py [--batch 256] [--hidden 1024] [--threads 2]
                                 [--warmup 20] [--min-time 3] [--steps N]

Model: Linear(784, H), ReLU, Linear(H, H), ReLU, Linear(H, 10) on random
inputs in [0, 1) and random labels in [0, 10); Adam(lr=1e-3, eps=1e-7, the
Keras default typeflow uses); CrossEntropyLoss on logits. One step is
zero_grad, forward, loss, backward, optimizer.step, as typeflow's
train_on_batch. The last line printed is

    pytorch samples_per_second=<float> batch=<B> hidden=<H> steps=<N> seconds=<s> threads=<T>

Run it through bench/compare_pytorch.sh, which sets the environment that
PyTorch 1.13 needs to run at full speed here.
"""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    parser.add_argument("--min-time", type=float, default=3.0, help="time at least this many seconds")
    parser.add_argument("--steps", type=int, default=0, help="time exactly this many steps instead")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model = nn.Sequential(
        nn.Linear(784, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(),
        nn.Linear(args.hidden, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()

    x = torch.rand(args.batch, 784)
    y = torch.randint(0, 10, (args.batch,))

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    first_loss = None
    for _ in range(args.warmup):
        first_loss = step().item()

    steps = 0
    start = time.perf_counter()
    while True:
        loss = step()
        steps += 1
        elapsed = time.perf_counter() - start
        if args.steps > 0:
            if steps >= args.steps:
                break
        elif elapsed >= args.min_time:
            break
    last_loss = loss.item()  # the steps above ran eagerly; this only reads a scalar
    elapsed = time.perf_counter() - start

    if not last_loss == last_loss or (first_loss is not None and last_loss > first_loss):
        raise SystemExit(f"pytorch_mlp: the loss did not fall on a repeated batch ({first_loss} -> {last_loss})")

    print(f"pytorch samples_per_second={steps * args.batch / elapsed:.1f} batch={args.batch} "
          f"hidden={args.hidden} steps={steps} seconds={elapsed:.3f} threads={torch.get_num_threads()} "
          f"loss={last_loss:.4f}")


if __name__ == "__main__":
    main()
