#!/usr/bin/env python3
"""Convolutional training steps in PyTorch, for comparison with typeflow's
bench/cnn_train_step.cpp.

    python3 bench/pytorch_cnn.py [--config mnist_cnn|conv] [--threads 2]
                                 [--warmup N] [--min-time S] [--steps N] [--seed 1]

Configurations (eager PyTorch, float32, no torch.compile), batch 128:
  mnist_cnn  the MNIST CNN (Keras's mnist_convnet without dropout):
               Conv2d(1, 32, 3), ReLU, MaxPool2d(2), Conv2d(32, 64, 3), ReLU,
               MaxPool2d(2), Flatten, Linear(1600, 128), ReLU, Linear(128, 10)
             225,034 parameters; torch.optim.Adam(lr=1e-3, eps=1e-7, Keras's
             epsilon), cross-entropy on the logits; inputs uniform in [0, 1)
             of shape (128, 1, 28, 28), labels uniform in [0, 10).
  conv       that CNN's second convolution alone: Conv2d(32, 64, 3) on a
             (128, 32, 13, 13) input that does not require grad (so backward
             computes only the weight's and bias's gradients, no input
             gradient), MSELoss (mean) against uniform [0, 1) targets of shape
             (128, 64, 11, 11), torch.optim.SGD(lr=1e-3).

Memory format: PyTorch's default, contiguous NCHW tensors (not
torch.channels_last), which is what a PyTorch user gets without asking;
typeflow computes channels-last (NHWC), Keras's layout. Flatten therefore
orders the 1600 features differently on the two sides (C, H, W here; H, W, C
in typeflow), which changes no cost.

Default initialisation (it does not affect the timing). One step is
zero_grad(set_to_none=True), forward, loss, backward, optimizer.step on the
same batch every step (drawn before timing). After --warmup untimed steps,
steps are timed until at least --min-time seconds have passed (and at least
2 steps), or exactly --steps. The loss must fall from the end of the warmup
to the last step (else the script exits with an error). The last line
printed is

    pytorch config=<c> images_per_second=<f> step_ms=<f> peak_rss_mib=<f> params=<N> gflop_per_second=<f> ...

where images = 128 per step, peak_rss_mib is the process's peak resident set
(resource.getrusage ru_maxrss) in MiB, and gflop_per_second counts 3 x the
forward FLOPs of the convolutions and Linear layers (2 x multiply-adds; bias,
ReLU, pooling, loss and optimizer not counted), as bench/cnn_train_step.cpp
does: mnist_cnn 5,262,080 and conv 4,460,544 forward FLOPs per image. That
is a convention: the conv config has no input gradient, so its real work is
2 x its forward FLOPs.

Run it through bench/compare_pytorch_cnn.sh, which sets the environment that
PyTorch 1.13 needs to run at full speed here.
"""

import argparse
import math
import resource
import time

import torch
from torch import nn

BATCH = 128

CONFIGS = {
    "mnist_cnn": dict(warmup=5, min_time=3.0,
                      forward_flops=2 * (26 * 26 * 32 * 3 * 3 * 1 + 11 * 11 * 64 * 3 * 3 * 32 + 1600 * 128 + 128 * 10),
                      params=225034),
    "conv": dict(warmup=5, min_time=3.0, forward_flops=2 * 11 * 11 * 64 * 3 * 3 * 32, params=64 * 3 * 3 * 32 + 64),
}


def mnist_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="mnist_cnn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (5)")
    parser.add_argument("--min-time", type=float, default=None, help="time at least this many seconds (3)")
    parser.add_argument("--steps", type=int, default=0, help="time exactly this many steps instead")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    config = CONFIGS[args.config]
    warmup = config["warmup"] if args.warmup is None else args.warmup
    min_time = config["min_time"] if args.min_time is None else args.min_time

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)

    if args.config == "mnist_cnn":
        model = mnist_cnn()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
        loss_function = nn.CrossEntropyLoss()
        x = torch.rand(BATCH, 1, 28, 28, generator=generator)
        y = torch.randint(0, 10, (BATCH,), generator=generator)
    else:
        model = nn.Conv2d(32, 64, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        loss_function = nn.MSELoss()
        x = torch.rand(BATCH, 32, 13, 13, generator=generator)  # requires_grad False: no input gradient
        y = torch.rand(BATCH, 64, 11, 11, generator=generator)
    params = sum(p.numel() for p in model.parameters())
    if params != config["params"]:
        raise SystemExit(f"pytorch_cnn: config {args.config} has {params} parameters, expected {config['params']}")

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_function(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    loss = None
    for _ in range(warmup):
        loss = step()
    first_loss = loss.item() if loss is not None else math.inf

    steps = 0
    start = time.perf_counter()
    while True:
        loss = step()
        steps += 1
        elapsed = time.perf_counter() - start
        if args.steps > 0:
            if steps >= args.steps:
                break
        elif elapsed >= min_time and steps >= 2:
            break
    last_loss = loss.item()
    elapsed = time.perf_counter() - start

    if not math.isfinite(last_loss) or last_loss > first_loss:
        raise SystemExit(f"pytorch_cnn: the loss did not fall on a repeated batch ({first_loss} -> {last_loss})")

    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux
    images = steps * BATCH
    gflops = 3.0 * config["forward_flops"] * images / elapsed / 1e9
    print(f"pytorch config={args.config} images_per_second={images / elapsed:.1f} "
          f"step_ms={1000.0 * elapsed / steps:.3f} peak_rss_mib={peak_rss_mib:.1f} params={params} "
          f"gflop_per_second={gflops:.2f} steps={steps} seconds={elapsed:.3f} batch={BATCH} "
          f"threads={torch.get_num_threads()} memory_format=nchw loss={first_loss:.4f}->{last_loss:.4f}")


if __name__ == "__main__":
    main()
