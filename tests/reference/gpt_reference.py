#!/usr/bin/env python3
"""Writes gpt.json: the loss and gradients a whole tiny GPT must compute in typeflow.

Every parameter is drawn from a seeded generator and rounded to float32, so
the C++ test can hold exactly the same values; the token ids and targets are
integers. The expected values are then computed by PyTorch in float64 from
those float32 parameters and stored as float64 numbers; typeflow computes in
float32, so the test compares them with a relative tolerance
(RELATIVE_TOLERANCE) plus a small absolute floor (ABSOLUTE_TOLERANCE). For
scale, each variant also records how far PyTorch's own float32 computation of
the same thing lands from the float64 values ("float32_max_abs_error", the
largest over the logits, the loss and every gradient).

Model: V = 11 tokens, T = 6 positions, D = 8, H = 2 heads (hd = 4), 2 blocks,
batch B = 2, MLP width 4D = 32 with exact (erf) GELU, LayerNorm eps 1e-5 with
gamma and beta, no dropout. Parameters are named by typeflow's scheme and use
typeflow's Dense layout: a kernel is (in, out) and y = x·kernel + bias (the
transpose of torch.nn.Linear's (out, in) weight).

  layers.1.embeddings (V, D)        token embedding
  layers.2.embeddings (T, D)        learned positional embedding
  for i in 0, 1 (block i):
    blocks.{i}.layer_norm.gamma, .beta (D)
    blocks.{i}.attn.qkv.kernel (D, 3D), blocks.{i}.attn.qkv.bias (3D)
    blocks.{i}.attn.proj.kernel (D, D), blocks.{i}.attn.proj.bias (D)
    blocks.{i}.layer_norm_1.gamma, .beta (D)
    blocks.{i}.dense.kernel (D, 4D),   blocks.{i}.dense.bias (4D)
    blocks.{i}.dense_1.kernel (4D, D), blocks.{i}.dense_1.bias (D)
  layers.4.gamma, layers.4.beta (D)  final layer norm
  layers.5.kernel (D, V), layers.5.bias (V)   head (untied variant only)

Forward, tokens (B, T) ints in [0, V):
  x = layers.1.embeddings[tokens] + layers.2.embeddings[0..T-1]
  each block:
    x = x + attn(layer_norm(x))
    x = x + dense_1(gelu(dense(layer_norm_1(x))))
  where attn is causal self-attention exactly as tests/reference/attention_reference.py
  documents it (qkv = h·qkv.kernel + qkv.bias; q, k, v = column thirds; head
  h takes columns h*hd .. (h+1)*hd - 1 of each; softmax(q k^T / sqrt(hd))
  with position t attending to 0..t; heads concatenated back in the same
  columns; then ·proj.kernel + proj.bias)
  h = layer_norm(x; layers.4.gamma, layers.4.beta)
  untied: logits = h·layers.5.kernel + layers.5.bias            (B, T, V)
  tied:   logits = h·layers.1.embeddings^T (no bias)            (B, T, V)
  loss = mean over all B*T positions of cross_entropy(logits, targets)
Gradients: d loss / d param for every parameter, under "grads" with the same
names and shapes (in the tied variant layers.1.embeddings's gradient holds
both its contributions, from the lookup and from the head).

The tied variant uses the untied variant's parameters without layers.5.*:
it stores no "params" of its own (read them from "untied"), only its
"param_order"; both variants use the same tokens and targets. The script checks the untied logits and every
gradient against a second implementation built from
torch.nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
batch_first=True) blocks with a boolean causal mask, to 1e-12.

Every array is stored as {"shape": [...], "values": [...]} with the values
flattened row-major (C order), each "values" list on one line to keep the
file small; "param_order" lists the parameter names in the order above.

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  /usr/bin/python3 tests/reference/gpt_reference.py
"""

import json
import math
import pathlib

import numpy as np
import torch
import torch.nn.functional as F

VOCAB, STEPS, WIDTH, HEADS, BLOCKS, BATCH = 11, 6, 8, 2, 2, 2
EPSILON = 1e-5
WEIGHT_SCALE = 0.2
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-5

generator = np.random.default_rng(20240612)


def float32_normal(shape, scale, mean=0.0):
    """mean + N(0, scale^2) draws rounded to float32, returned as float64."""
    return (mean + generator.standard_normal(size=shape) * scale).astype(np.float32).astype(np.float64)


def array(tensor):
    tensor = tensor.detach()
    values = tensor.reshape(-1).tolist()
    if not tensor.is_floating_point():
        return {"shape": list(tensor.shape), "values": [int(v) for v in values]}
    return {"shape": list(tensor.shape), "values": [float(v) for v in values]}


def make_params():
    """The untied model's parameters in typeflow's names, in param_order."""
    d, v, t = WIDTH, VOCAB, STEPS
    p = {
        "layers.1.embeddings": float32_normal((v, d), WEIGHT_SCALE),
        "layers.2.embeddings": float32_normal((t, d), WEIGHT_SCALE),
    }
    for i in range(BLOCKS):
        b = f"blocks.{i}."
        p[b + "layer_norm.gamma"] = float32_normal((d,), 0.1, mean=1.0)
        p[b + "layer_norm.beta"] = float32_normal((d,), 0.1)
        p[b + "attn.qkv.kernel"] = float32_normal((d, 3 * d), WEIGHT_SCALE)
        p[b + "attn.qkv.bias"] = float32_normal((3 * d,), WEIGHT_SCALE)
        p[b + "attn.proj.kernel"] = float32_normal((d, d), WEIGHT_SCALE)
        p[b + "attn.proj.bias"] = float32_normal((d,), WEIGHT_SCALE)
        p[b + "layer_norm_1.gamma"] = float32_normal((d,), 0.1, mean=1.0)
        p[b + "layer_norm_1.beta"] = float32_normal((d,), 0.1)
        p[b + "dense.kernel"] = float32_normal((d, 4 * d), WEIGHT_SCALE)
        p[b + "dense.bias"] = float32_normal((4 * d,), WEIGHT_SCALE)
        p[b + "dense_1.kernel"] = float32_normal((4 * d, d), WEIGHT_SCALE)
        p[b + "dense_1.bias"] = float32_normal((d,), WEIGHT_SCALE)
    p["layers.4.gamma"] = float32_normal((d,), 0.1, mean=1.0)
    p["layers.4.beta"] = float32_normal((d,), 0.1)
    p["layers.5.kernel"] = float32_normal((d, v), WEIGHT_SCALE)
    p["layers.5.bias"] = float32_normal((v,), WEIGHT_SCALE)
    return p


def attention(x, kernel, bias, proj_kernel, proj_bias):
    batch, steps, width = x.shape
    head_width = width // HEADS
    qkv = x @ kernel + bias
    q, k, v = qkv[..., 0:width], qkv[..., width:2 * width], qkv[..., 2 * width:3 * width]
    q, k, v = (t.reshape(batch, steps, HEADS, head_width).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_width)
    allowed = torch.tril(torch.ones(steps, steps, dtype=torch.bool))
    scores = scores.masked_fill(~allowed, float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, steps, width)
    return y @ proj_kernel + proj_bias


def gpt_logits(p, tokens, tied):
    """The model as documented above; p maps typeflow's names to tensors."""
    steps = tokens.shape[1]
    x = p["layers.1.embeddings"][tokens] + p["layers.2.embeddings"][:steps]
    for i in range(BLOCKS):
        b = f"blocks.{i}."
        h = F.layer_norm(x, (WIDTH,), p[b + "layer_norm.gamma"], p[b + "layer_norm.beta"], eps=EPSILON)
        x = x + attention(h, p[b + "attn.qkv.kernel"], p[b + "attn.qkv.bias"],
                          p[b + "attn.proj.kernel"], p[b + "attn.proj.bias"])
        h = F.layer_norm(x, (WIDTH,), p[b + "layer_norm_1.gamma"], p[b + "layer_norm_1.beta"], eps=EPSILON)
        h = F.gelu(h @ p[b + "dense.kernel"] + p[b + "dense.bias"])
        x = x + h @ p[b + "dense_1.kernel"] + p[b + "dense_1.bias"]
    h = F.layer_norm(x, (WIDTH,), p["layers.4.gamma"], p["layers.4.beta"], eps=EPSILON)
    if tied:
        return h @ p["layers.1.embeddings"].T
    return h @ p["layers.5.kernel"] + p["layers.5.bias"]


def mean_cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def transformer_encoder_check(p, tokens, targets):
    """The untied model again from nn.TransformerEncoderLayer blocks: (logits, grads)."""
    p = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
    layers = []
    for i in range(BLOCKS):
        b = f"blocks.{i}."
        layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=4 * WIDTH, dropout=0.0,
                                                 activation="gelu", layer_norm_eps=EPSILON, batch_first=True,
                                                 norm_first=True, dtype=torch.float64)
        layer.train()  # no inference fast path
        with torch.no_grad():
            layer.norm1.weight.copy_(p[b + "layer_norm.gamma"]); layer.norm1.bias.copy_(p[b + "layer_norm.beta"])
            layer.self_attn.in_proj_weight.copy_(p[b + "attn.qkv.kernel"].T)
            layer.self_attn.in_proj_bias.copy_(p[b + "attn.qkv.bias"])
            layer.self_attn.out_proj.weight.copy_(p[b + "attn.proj.kernel"].T)
            layer.self_attn.out_proj.bias.copy_(p[b + "attn.proj.bias"])
            layer.norm2.weight.copy_(p[b + "layer_norm_1.gamma"]); layer.norm2.bias.copy_(p[b + "layer_norm_1.beta"])
            layer.linear1.weight.copy_(p[b + "dense.kernel"].T); layer.linear1.bias.copy_(p[b + "dense.bias"])
            layer.linear2.weight.copy_(p[b + "dense_1.kernel"].T); layer.linear2.bias.copy_(p[b + "dense_1.bias"])
        layers.append(layer)
    steps = tokens.shape[1]
    blocked = ~torch.tril(torch.ones(steps, steps, dtype=torch.bool))
    x = p["layers.1.embeddings"][tokens] + p["layers.2.embeddings"][:steps]
    for layer in layers:
        x = layer(x, src_mask=blocked)
    head = torch.nn.Linear(WIDTH, VOCAB, dtype=torch.float64)
    with torch.no_grad():
        head.weight.copy_(p["layers.5.kernel"].T); head.bias.copy_(p["layers.5.bias"])
    logits = head(F.layer_norm(x, (WIDTH,), p["layers.4.gamma"], p["layers.4.beta"], eps=EPSILON))
    mean_cross_entropy(logits, targets).backward()
    grads = {n: t.grad for n, t in p.items() if t.grad is not None}
    for i, layer in enumerate(layers):
        b = f"blocks.{i}."
        grads[b + "layer_norm.gamma"], grads[b + "layer_norm.beta"] = layer.norm1.weight.grad, layer.norm1.bias.grad
        grads[b + "attn.qkv.kernel"] = layer.self_attn.in_proj_weight.grad.T
        grads[b + "attn.qkv.bias"] = layer.self_attn.in_proj_bias.grad
        grads[b + "attn.proj.kernel"] = layer.self_attn.out_proj.weight.grad.T
        grads[b + "attn.proj.bias"] = layer.self_attn.out_proj.bias.grad
        grads[b + "layer_norm_1.gamma"] = layer.norm2.weight.grad
        grads[b + "layer_norm_1.beta"] = layer.norm2.bias.grad
        grads[b + "dense.kernel"], grads[b + "dense.bias"] = layer.linear1.weight.grad.T, layer.linear1.bias.grad
        grads[b + "dense_1.kernel"], grads[b + "dense_1.bias"] = layer.linear2.weight.grad.T, layer.linear2.bias.grad
    grads["layers.5.kernel"], grads["layers.5.bias"] = head.weight.grad.T, head.bias.grad
    return logits, grads


def variant(all_params, tokens, targets, tied):
    names = [n for n in all_params if not (tied and n.startswith("layers.5."))]
    p = {n: torch.tensor(all_params[n], requires_grad=True) for n in names}
    logits = gpt_logits(p, tokens, tied)
    loss = mean_cross_entropy(logits, targets)
    loss.backward()

    if not tied:
        check_logits, check_grads = transformer_encoder_check(p, tokens, targets)
        assert torch.allclose(logits, check_logits, rtol=0, atol=1e-12)
        assert sorted(check_grads) == sorted(names)
        for n in names:
            assert torch.allclose(p[n].grad, check_grads[n], rtol=0, atol=1e-12), n

    # The same in float32, for the record.
    p32 = {n: t.detach().float().requires_grad_(True) for n, t in p.items()}
    logits32 = gpt_logits(p32, tokens, tied)
    loss32 = mean_cross_entropy(logits32, targets)
    loss32.backward()
    float32_error = max([(logits32.double() - logits).abs().max().item(), abs(loss32.item() - loss.item())]
                        + [(p32[n].grad.double() - p[n].grad).abs().max().item() for n in names])

    result = {"tied": tied, "param_order": names}
    if not tied:
        result["params"] = {n: array(p[n]) for n in names}
    return result | {
        "logits": array(logits),
        "loss": loss.item(),
        "grads": {n: array(p[n].grad) for n in names},
        "float32_max_abs_error": float32_error,
        "largest_gradient": max(p[n].grad.abs().max().item() for n in names),
    }


def dumps(value, indent=0):
    """json.dumps(value, indent=1), except that lists of numbers stay on one line."""
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}" if items else "{}"
    if isinstance(value, list) and not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        items = [f"{pad}{dumps(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]" if items else "[]"
    return json.dumps(value)


def main():
    torch.set_default_dtype(torch.float64)
    params = make_params()
    tokens = torch.tensor(generator.integers(0, VOCAB, size=(BATCH, STEPS)), dtype=torch.long)
    targets = torch.tensor(generator.integers(0, VOCAB, size=(BATCH, STEPS)), dtype=torch.long)
    document = {
        "generated_by": "tests/reference/gpt_reference.py",
        "torch_version": torch.__version__,
        "precision": "parameters are float32 values; expected values computed in float64",
        "layout": "arrays are {shape, values} with values row-major; kernels are (in, out), y = x . kernel + bias",
        "relative_tolerance": RELATIVE_TOLERANCE,
        "absolute_tolerance": ABSOLUTE_TOLERANCE,
        "config": {"vocab": VOCAB, "seq_len": STEPS, "d_model": WIDTH, "heads": HEADS, "blocks": BLOCKS,
                   "batch": BATCH, "mlp_width": 4 * WIDTH, "layer_norm_epsilon": EPSILON, "gelu": "exact (erf)"},
        "tokens": array(tokens),
        "targets": array(targets),
        "untied": variant(params, tokens, targets, tied=False),
        "tied": variant(params, tokens, targets, tied=True),
    }
    path = pathlib.Path(__file__).with_name("gpt.json")
    path.write_text(dumps(document) + "\n")
    for name in ("untied", "tied"):
        v = document[name]
        print(f"{name}: loss {v['loss']:.6f} (ln V = {math.log(VOCAB):.6f}), largest gradient "
              f"{v['largest_gradient']:.3e}, float32 max abs error {v['float32_max_abs_error']:.2e}")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
