#!/usr/bin/env python3
"""bench/gpu/gpt2_train_step.cpp's step in PyTorch, on the GPU: eager and torch.compile.

    python3 bench/gpu/torch_gpt2.py [--modes eager compile] [--batch 16] [--min-time 3]

GPT-2 124M as nanoGPT writes it (12 layers, 12 heads, width 768, vocabulary
50257, 1024 positions, tanh GELU, layer norm eps 1e-5, the head tied to the
token embedding, no dropout), bf16 autocast with float32 weights,
F.scaled_dot_product_attention (flash attention) with the causal mask, fused
AdamW (lr 6e-4, betas 0.9 / 0.95, weight decay 0.1 on the matrices and
embeddings) after clipping the global norm to 1, cross-entropy on the
logits. One step is zero_grad, forward, loss, backward, clip, step and
loss.item() (typeflow's train_on_batch returns the loss), over 16 windows of
1024 random tokens uploaded from pinned host memory each step. Prints, per
mode, tokens_per_second, mfu (6 N + 12 L T D FLOPs per token, N without the
position embeddings, against 989 TFLOP/s) and the peak memory PyTorch
allocated.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

LAYERS, HEADS, WIDTH, CONTEXT, VOCAB = 12, 12, 768, 1024, 50257
PEAK_FLOPS = 989e12


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.c_proj = nn.Linear(WIDTH, WIDTH)
        self.ln_2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.mlp_proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH, eps=1e-5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def measure(mode: str, batch: int, min_time: float) -> dict:
    torch.manual_seed(1)
    model = GPT2().cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), fused=True)
    forward = torch.compile(model) if mode == "compile" else model
    ids_host = torch.randint(0, VOCAB, (batch, CONTEXT)).pin_memory()
    labels_host = ((ids_host + 1) % VOCAB).pin_memory()

    def step() -> torch.Tensor:
        ids = ids_host.cuda(non_blocking=True)
        labels = labels_host.cuda(non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = forward(ids)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    started = time.perf_counter()
    for _ in range(3):  # warm up (and compile)
        step().item()
    warmup = time.perf_counter() - started
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps, start = 0, time.perf_counter()
    while True:
        step().item()
        steps += 1
        if time.perf_counter() - start >= min_time and steps >= 3:
            break
    elapsed = time.perf_counter() - start
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    flops_per_token = 6 * n + 12 * LAYERS * CONTEXT * WIDTH
    tokens_per_second = steps * batch * CONTEXT / elapsed
    return {"mode": mode, "tokens_per_second": tokens_per_second, "mfu": tokens_per_second * flops_per_token / PEAK_FLOPS,
            "peak_GiB": torch.cuda.max_memory_allocated() / 2**30, "warmup_s": warmup, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="+", default=["eager", "compile"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--min-time", type=float, default=3.0)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    for mode in args.modes:
        r = measure(mode, args.batch, args.min_time)
        print(f"torch gpt2 mode={r['mode']} batch={args.batch} tokens_per_second={r['tokens_per_second']:.0f} "
              f"mfu={r['mfu']:.3f} peak_GiB={r['peak_GiB']:.1f} warmup_s={r['warmup_s']:.1f} steps={r['steps']}",
              flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
