#!/usr/bin/env python3
"""bench/gpu/gemm_bench.cu's sweep with torch.matmul, for comparison.

    python3 bench/gpu/torch_gemm.py [--samples 30] [--warmup 3] [--dtype bfloat16 ...] [--json PATH]

C (m, n) = A (m, k) @ B (k, n), contiguous, written into a preallocated C
(out=). dtypes: float32 (torch.backends.cuda.matmul.allow_tf32 = False),
tf32 (allow_tf32 = True; fp32 tensors), bfloat16 and float16 (16-bit C).
Shapes: squares 512..8192 and m x n x k 4096x4096x1024, 8192x1024x4096.

First, the memory ceiling as gemm_bench.cu's copy/device_to_device/2GiB
measures it: a 2 GiB device-to-device copy, GB/s counting bytes read plus
bytes written (median of --samples copies).

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
# bench/gpu/gemm_algos.cu's products (--gpt2): name, m, n, k, A stored transposed, B stored transposed.
GPT2 = [("square 2048", 2048, 2048, 2048, False, False), ("square 4096", 4096, 4096, 4096, False, False),
        ("square 8192", 8192, 8192, 8192, False, False), ("qkv fwd", 8192, 2304, 768, False, False),
        ("qkv dX", 8192, 768, 2304, False, True), ("qkv dW", 768, 2304, 8192, True, False),
        ("attn proj fwd", 8192, 768, 768, False, False), ("mlp fc fwd", 8192, 3072, 768, False, False),
        ("mlp fc dX", 8192, 768, 3072, False, True), ("mlp fc dW", 768, 3072, 8192, True, False),
        ("mlp proj fwd", 8192, 768, 3072, False, False), ("logits fwd", 8192, 50304, 768, False, True),
        ("logits dX", 8192, 768, 50304, False, False), ("logits dW", 50304, 768, 8192, True, False)]


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


def measure_copy(samples: int, warmup: int) -> float:
    """GB/s of one 2 GiB device-to-device copy, read plus written."""
    nbytes = 2 << 30
    src = torch.rand(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(warmup):
        dst.copy_(src)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(samples):
        start.record()
        dst.copy_(src)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * nbytes / (statistics.median(times) * 1e-3) / 1e9


def measure_gpt2(samples: int, warmup: int) -> None:
    """gemm_algos.cu's bf16 products with torch.matmul (16-bit C), transposes as views."""
    print(f"{'product':<14} {'m x n x k':>20} {'ms':>9} {'TFLOP/s':>8}")
    for name, m, n, k, ta, tb in GPT2:
        a = (torch.rand(k, m, device="cuda") * 2 - 1).to(torch.bfloat16).t() if ta else \
            (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(n, k, device="cuda") * 2 - 1).to(torch.bfloat16).t() if tb else \
            (torch.rand(k, n, device="cuda") * 2 - 1).to(torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(warmup):
            torch.matmul(a, b, out=c)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(samples):
            start.record()
            torch.matmul(a, b, out=c)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        ms = statistics.median(times)
        print(f"{name:<14} {f'{m}x{n}x{k}':>20} {ms:>9.4f} {2.0 * m * n * k / (ms * 1e-3) / 1e12:>8.1f}", flush=True)
        del a, b, c
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=30, help="timed batches per case (median taken)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batches per case first")
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, default=DTYPES)
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    parser.add_argument("--gpt2", action="store_true", help="only gemm_algos.cu's bf16 products (GPT-2's shapes)")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print("torch_gemm: no CUDA device; nothing to measure")
        return
    device = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device {device}")
    if args.gpt2:
        measure_gpt2(max(args.samples, 15), args.warmup)
        return
    print(f"bf16/fp16 reduced-precision reductions allowed: "
          f"{torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}/"
          f"{torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}")
    copy = measure_copy(args.samples, args.warmup)
    print(f"copy/device_to_device/2GiB GB/s={copy:.0f}", flush=True)
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
            json.dump({"torch": torch.__version__, "cuda": torch.version.cuda, "device": device, "copy_GBps": copy,
                       "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
