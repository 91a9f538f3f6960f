#!/usr/bin/env python3
"""bench/gpu/mlp_train_step.cpp's step in PyTorch eager, on the GPU.

    python3 bench/gpu/torch_mlp.py [--batch 256 4096] [--min-time 2] [--json PATH]

Model: Linear(784, 1024), ReLU, Linear(1024, 1024), ReLU, Linear(1024, 10),
float32 (TF32 off, as typeflow's float32 policy), Adam(lr=1e-3, eps=1e-7),
cross-entropy on logits. One step is zero_grad, forward, loss, backward,
step, and loss.item(): typeflow's train_on_batch returns the loss, so both
wait for each step. A second figure without the per-step .item() is printed
for reference.
"""

import argparse
import json
import time

import torch
from torch import nn


def measure(batch: int, min_time: float, sync_each_step: bool) -> float:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    x_host = torch.rand(batch, 784).pin_memory()
    y_host = torch.randint(0, 10, (batch,)).pin_memory()

    def step() -> torch.Tensor:
        # The batch comes from the host each step, as typeflow's does.
        x = x_host.cuda(non_blocking=True)
        y = y_host.cuda(non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(20):
        step().item()
    torch.cuda.synchronize()
    steps, start = 0, time.perf_counter()
    while True:
        loss = step()
        if sync_each_step:
            loss.item()
        steps += 1
        if steps % 50 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - start >= min_time:
                break
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results = []
    for b in args.batch:
        synced = measure(b, args.min_time, True)
        unsynced = measure(b, args.min_time, False)
        results.append({"batch": b, "samples_per_second": synced, "samples_per_second_no_item": unsynced})
        print(f"torch eager mlp batch={b} samples_per_second={synced:.0f} (without per-step .item(): {unsynced:.0f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
