#!/usr/bin/env python3
"""One training step of a small nanoGPT-style GPT in PyTorch, for comparison
with typeflow's bench/gpt_train_step.cpp.

    python3 bench/pytorch_gpt.py [--config small|large] [--vocab 65] [--threads 2]
                                 [--warmup N] [--min-time S] [--steps N] [--seed 1]
                                 [--policy float32|mixed_bfloat16]

--policy mixed_bfloat16 runs the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision on the
CPU (its Linear layers and matmuls in bf16 through oneDNN, layer norm and
softmax in float32, float32 weights and optimizer), for the side-by-side
figure against typeflow's mixed_bfloat16.

Model (eager PyTorch, float32, no torch.compile, dropout 0), as nanoGPT's
model.py with bias=True:
  token embedding (V, D) + learned positional embedding (T, D);
  n_layer blocks of  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
    attn: one Linear(D, 3D) giving q, k, v; n_head heads of hd = D / n_head;
          causal softmax(q k^T / sqrt(hd)) v written out as nanoGPT's slow
          path (matmul, masked_fill(-inf), softmax, matmul), since torch 1.13
          has no fused scaled_dot_product_attention; Linear(D, D) projection
    mlp:  Linear(D, 4D), exact GELU, Linear(4D, D)
  final LayerNorm (eps 1e-5), untied Linear(D, V) head (with bias).
  Initialisation as nanoGPT's (normal(0, 0.02), residual projections scaled
  by 1/sqrt(2 n_layer)); it does not affect the timing.
Loss: cross-entropy over all B*T positions (mean).
Optimizer: torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.99), eps=1e-8) with
weight_decay 0.1 on the 2-D parameters (matmul weights, both embeddings) and
0 on biases and LayerNorm parameters, nanoGPT's grouping.

Configurations (nanoGPT's "baby GPT" shakespeare_char is the large one):
  small: n_layer 4, n_head 4, n_embd 128, block_size  64, batch 12
  large: n_layer 6, n_head 6, n_embd 384, block_size 256, batch 64
  gpt2:  GPT-2 124M: n_layer 12, n_head 12, n_embd 768, vocab 50257, 1024
         positions, tanh GELU, the head tied to the token embedding (no
         bias); block_size 64, batch 4

Data: random token sequences of length T+1 (seeded) with inputs seq[:, :-1]
and targets seq[:, 1:]; a pool of 8 batches drawn before timing is cycled, so
drawing does not count. One step is zero_grad, forward, loss, backward,
optimizer.step. After --warmup untimed steps, steps are timed until at least
--min-time seconds have passed (and at least 2 steps), or exactly --steps.
The last line printed is

    pytorch config=<c> tokens_per_second=<f> step_ms=<f> peak_rss_mib=<f> params=<N> ...

where tokens = batch * block_size per step, peak_rss_mib is the process's
peak resident set (resource.getrusage ru_maxrss) in MiB, and params counts
every parameter (both embeddings included; nanoGPT's own report leaves out
the positional one).

Run it through bench/compare_pytorch_gpt.sh, which sets the environment that
PyTorch 1.13 needs to run at full speed here.
"""

import argparse
import math
import resource
import time

import torch
from torch import nn
from torch.nn import functional as F

CONFIGS = {
    #        n_layer n_head n_embd block_size batch warmup min_time
    "small": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=12, warmup=10, min_time=5.0),
    "large": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=64, warmup=2, min_time=20.0),
    # GPT-2 124M as Hugging Face's GPT2LMHeadModel: V 50257, 1024 positions
    # (T 64 of them read), tanh GELU, the head tied to wte (no bias).
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=64, batch=4, warmup=2, min_time=20.0,
                 vocab=50257, positions=1024, tied=True, gelu="tanh"),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hd = C // self.n_head
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)  # (B, nh, T, hd)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, nh, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd: int, gelu: str = "none") -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=True)
        self.gelu = nn.GELU(approximate=gelu)  # "none": exact (erf) GELU; "tanh": GPT-2's
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, gelu: str = "none") -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd, gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, n_layer: int, n_head: int, n_embd: int, block_size: int,
                 positions: int = 0, tied: bool = False, gelu: str = "none") -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(positions or block_size, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size, gelu) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab, bias=not tied)
        self.apply(self._init_weights)
        if tied:
            self.lm_head.weight = self.wte.weight  # GPT-2's tied head: one (V, D) matrix
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    parser.add_argument("--vocab", type=int, default=65)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (small 10, large 2)")
    parser.add_argument("--min-time", type=float, default=None,
                        help="time at least this many seconds (small 5, large 20)")
    parser.add_argument("--steps", type=int, default=0, help="time exactly this many steps instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", choices=["float32", "mixed_bfloat16"], default="float32")
    args = parser.parse_args()

    config = CONFIGS[args.config]
    warmup = config["warmup"] if args.warmup is None else args.warmup
    min_time = config["min_time"] if args.min_time is None else args.min_time
    batch, block_size = config["batch"], config["block_size"]

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    vocab = config.get("vocab", args.vocab)
    model = GPT(vocab, config["n_layer"], config["n_head"], config["n_embd"], block_size,
                config.get("positions", 0), config.get("tied", False), config.get("gelu", "none"))
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-3, betas=(0.9, 0.99), eps=1e-8)

    generator = torch.Generator().manual_seed(args.seed)
    pool = [torch.randint(0, vocab, (batch, block_size + 1), generator=generator) for _ in range(8)]
    pool = [(seq[:, :-1].contiguous(), seq[:, 1:].contiguous()) for seq in pool]

    def step(i: int) -> torch.Tensor:
        x, y = pool[i % len(pool)]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.policy == "mixed_bfloat16"):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
        return loss

    first_loss = None
    for i in range(warmup):
        loss = step(i)
        if first_loss is None:
            first_loss = loss.item()

    steps = 0
    start = time.perf_counter()
    while True:
        loss = step(warmup + steps)
        steps += 1
        elapsed = time.perf_counter() - start
        if args.steps > 0:
            if steps >= args.steps:
                break
        elif elapsed >= min_time and steps >= 2:
            break
    last_loss = loss.item()
    elapsed = time.perf_counter() - start

    if not math.isfinite(last_loss):
        raise SystemExit(f"pytorch_gpt: the loss is not finite ({first_loss} -> {last_loss})")

    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux
    tokens = steps * batch * block_size
    print(f"pytorch config={args.config} tokens_per_second={tokens / elapsed:.1f} "
          f"step_ms={1000.0 * elapsed / steps:.2f} peak_rss_mib={peak_rss_mib:.1f} params={params} "
          f"steps={steps} seconds={elapsed:.3f} batch={batch} block_size={block_size} vocab={vocab} "
          f"threads={torch.get_num_threads()} loss={last_loss:.4f} policy={args.policy}")


if __name__ == "__main__":
    main()
