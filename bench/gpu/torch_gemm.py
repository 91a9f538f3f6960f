#!/usr/bin/env python3
"""bench/gpu/gemm_bench.cu's sweep with torch.matmul, for comparison.

    python3 bench/gpu/torch_gemm.py [--samples 30] [--warmup 3] [--dtype bfloat16 ...] [--json PATH]

C (m, n) = A (m, k) @ B (k, n), contiguous, written into a preallocated C
(out=). dtypes: float32 (torch.backends.cuda.matmul.allow_tf32 = False),
tf32 (allow_tf32 = True; fp32 tensors), bfloat16 and float16 (16-bit C).
Shapes: squares 512..8192 and m x n x k 4096x4096x1024, 8192x1024x4096.

Timing as in gemm_bench.cu: each sample is a batch of back-to-back matmuls
(~1 TFLOP, at most 100) between two CUDA events, divided per matmul; the
figure is the median of --samples samples after --warmup untimed batches.
TFLOP/s counts 2*m*n*k per matmul.
"""

import argparse
import json
import statistics
import sys
import warnings

import torch

SIZES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
         (4096, 4096, 1024), (8192, 1024, 4096)]
DTYPES = ["float32", "tf32", "bfloat16", "float16"]


def set_tf32(enabled: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # newer torch prefers fp32_precision; the flag still works
        torch.backends.cuda.matmul.allow_tf32 = enabled
    if torch.backends.cuda.matmul.allow_tf32 != enabled:
        sys.exit(f"torch_gemm: could not set allow_tf32 = {enabled}")


def batch_for(flops: float) -> int:
    return int(min(max(1e12 / flops, 1.0), 100.0))


def measure(m: int, n: int, k: int, name: str, samples: int, warmup: int) -> dict:
    dtype = torch.float32 if name in ("float32", "tf32") else getattr(torch, name)
    set_tf32(name == "tf32")
    generator = torch.Generator(device="cuda").manual_seed(1)
    a = (torch.rand(m, k, device="cuda", generator=generator) * 2 - 1).to(dtype)
    b = (torch.rand(k, n, device="cuda", generator=generator) * 2 - 1).to(dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    flops = 2.0 * m * n * k
    batch = batch_for(flops)

    def run_batch() -> None:
        for _ in range(batch):
            torch.matmul(a, b, out=c)

    for _ in range(warmup):
        run_batch()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_gemm_ms = []
    for _ in range(samples):
        start.record()
        run_batch()
        stop.record()
        stop.synchronize()
        per_gemm_ms.append(start.elapsed_time(stop) / batch)
    ms = statistics.median(per_gemm_ms)
    del a, b, c
    torch.cuda.empty_cache()
    return {"m": m, "n": n, "k": k, "dtype": name, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12, "batch": batch,
            "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=30, help="timed batches per case (median taken)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches per case first")
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, default=DTYPES)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("torch_gemm: no CUDA device; nothing to measure")
        return
    device = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device {device}")
    print(f"bf16/fp16 reduced-precision reductions allowed: "
          f"{torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}/"
          f"{torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}")
    print(f"{'shape (m x n x k)':>20} {'dtype':>9} {'ms':>10} {'TFLOP/s':>9}")
    results = []
    for name in args.dtype:
        for m, n, k in SIZES:
            r = measure(m, n, k, name, args.samples, args.warmup)
            results.append(r)
            print(f"{f'{m}x{n}x{k}':>20} {name:>9} {r['ms']:>10.4f} {r['tflops']:>9.1f}", flush=True)
    set_tf32(False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "cuda": torch.version.cuda, "device": device, "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
