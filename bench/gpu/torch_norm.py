#!/usr/bin/env python3
"""PyTorch's side of bench/gpu/norm_bench.cu: the same shapes, timed the same way.

  layer_norm_fwd     F.layer_norm                       (rows, features) = (8192, 768), (16384, 1024), (4096, 4096)
  layer_norm_fwdbwd  F.layer_norm, then the gradients of x, weight and bias
  layer_norm_bwd     fwdbwd - fwd (an estimate: PyTorch runs backward as its own kernels)
  xent_fwdbwd        F.cross_entropy (mean over rows) and d(loss)/d(logits)   (8192, 50257), (65536, 1000)
  copy               dst.copy_(src) of each case's bytes / 2

Timing: CUDA events around a batch of calls (about 5 ms of work), after a
warm-up; the median of the repetitions, per call. GB/s counts the bytes the
operation must move once, by the formulas norm_bench.cu uses (without its
layer_norm workspace term): inputs read and outputs written, in float32.
of_copy = GB/s over the copy's GB/s for the same bytes.

  python3 bench/gpu/torch_norm.py [--json PATH] [--warmup 5] [--reps 30]
"""
import argparse
import json
import statistics
import sys

LAYER_NORM_SHAPES = [(8192, 768), (16384, 1024), (4096, 4096)]
XENT_SHAPES = [(8192, 50257), (65536, 1000)]
EPSILON = 1e-5


def layer_norm_forward_bytes(rows, features):
    return 4.0 * (2 * rows * features + 2 * features + 2 * rows)


def layer_norm_backward_bytes(rows, features):
    return 4.0 * (3 * rows * features + 3 * features + 2 * rows)


def xent_bytes(rows, classes):
    return 4.0 * (2 * rows * classes + 2 * rows)


def batch_for(nbytes):
    return max(1, min(100, int(2e10 / nbytes)))


def time_call(torch, fn, nbytes, warmup, reps):
    """Median milliseconds per call of fn(), timed with CUDA events around batches."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    batch = batch_for(nbytes)
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / batch)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch_norm: PyTorch is not importable ({e}); nothing to measure.")
        return 0
    if not torch.cuda.is_available():
        print("torch_norm: no CUDA device visible to PyTorch; nothing to measure.")
        return 0

    device = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    results = []
    copy_cache = {}

    def copy_rate(nbytes):
        half = int(nbytes // 2) // 4  # floats
        if half not in copy_cache:
            src = torch.ones(half, device=device)
            dst = torch.empty_like(src)
            ms = time_call(torch, lambda: dst.copy_(src), 2.0 * half * 4, args.warmup, args.reps)
            copy_cache[half] = 2.0 * half * 4 / (ms * 1e-3) / 1e9
            del src, dst
        return copy_cache[half]

    def record(case, rows, width, ms, nbytes):
        rate = nbytes / (ms * 1e-3) / 1e9
        copy = copy_rate(nbytes)
        results.append({"case": case, "rows": rows, "width": width, "ms": ms, "bytes": nbytes,
                        "GB/s": rate, "copy_GB/s": copy, "of_copy": rate / copy})

    generator = torch.Generator(device=device).manual_seed(0)
    for rows, features in LAYER_NORM_SHAPES:
        x = torch.rand(rows, features, device=device, generator=generator) * 5 - 2
        weight = torch.rand(features, device=device, generator=generator) + 0.5
        bias = torch.rand(features, device=device, generator=generator) * 2 - 1
        dy = torch.rand(rows, features, device=device, generator=generator) * 2 - 1
        fwd_bytes = layer_norm_forward_bytes(rows, features)
        bwd_bytes = layer_norm_backward_bytes(rows, features)

        with torch.no_grad():
            fwd_ms = time_call(torch, lambda: F.layer_norm(x, (features,), weight, bias, EPSILON), fwd_bytes,
                               args.warmup, args.reps)
        record("layer_norm_fwd", rows, features, fwd_ms, fwd_bytes)

        xg = x.clone().requires_grad_(True)
        wg = weight.clone().requires_grad_(True)
        bg = bias.clone().requires_grad_(True)

        def fwdbwd():
            y = F.layer_norm(xg, (features,), wg, bg, EPSILON)
            return torch.autograd.grad(y, (xg, wg, bg), dy)

        both_ms = time_call(torch, fwdbwd, fwd_bytes + bwd_bytes, args.warmup, args.reps)
        record("layer_norm_fwdbwd", rows, features, both_ms, fwd_bytes + bwd_bytes)
        record("layer_norm_bwd", rows, features, max(both_ms - fwd_ms, 1e-6), bwd_bytes)
        del x, dy, xg, wg, bg

    for rows, classes in XENT_SHAPES:
        logits = (torch.rand(rows, classes, device=device, generator=generator) * 12 - 6).requires_grad_(True)
        labels = torch.randint(0, classes, (rows,), device=device, generator=generator)

        def xent():
            loss = F.cross_entropy(logits, labels)
            return torch.autograd.grad(loss, logits)

        nbytes = xent_bytes(rows, classes)
        record("xent_fwdbwd", rows, classes, time_call(torch, xent, nbytes, args.warmup, args.reps), nbytes)
        del logits, labels

    print(f"torch_norm: PyTorch {torch.__version__} on {name}")
    header = f"{'case':<20}{'rows':>8}{'width':>8}{'ms':>10}{'GB/s':>10}{'copy GB/s':>11}{'of copy':>9}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['case']:<20}{r['rows']:>8}{r['width']:>8}{r['ms']:>10.4f}{r['GB/s']:>10.1f}"
              f"{r['copy_GB/s']:>11.1f}{r['of_copy']:>9.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"torch": torch.__version__, "device": name, "epsilon": EPSILON, "results": results}, out,
                      indent=2)
        print(f"torch_norm: wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
