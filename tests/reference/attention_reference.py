#!/usr/bin/env python3
"""Writes attention.json: what typeflow's causal_self_attention<Heads> must compute.

Every input (x, the four parameters, the upstream gradient d_out) is drawn
from a seeded generator and rounded to float32, so the C++ test can hold
exactly the same values. The expected values are then computed by PyTorch in
float64 from those float32 inputs and stored as float64 numbers; the C++
layer computes in float32, so the test compares them with a relative
tolerance (RELATIVE_TOLERANCE) plus a small absolute floor
(ABSOLUTE_TOLERANCE). For scale, each case also records how far PyTorch's own
float32 computation of the same thing lands from the float64 values
("float32_max_abs_error", the largest over out and every gradient).

Layout (typeflow's Dense convention: a kernel is (in, out) and y = x·kernel
+ bias, the transpose of torch.nn.Linear's (out, in) weight):
  x:            (B, T, D)
  qkv.kernel:   (D, 3D)     qkv.bias:  (3D)
  proj.kernel:  (D, D)      proj.bias: (D)
  qkv = x·qkv.kernel + qkv.bias                      (B, T, 3D)
  q = qkv[..., 0:D], k = qkv[..., D:2D], v = qkv[..., 2D:3D]
  head h (of H, hd = D / H) uses columns h*hd .. (h+1)*hd - 1 of q, k and v:
    att_h = softmax(q_h k_h^T / sqrt(hd)) over the key axis, with the causal
            mask: query position t attends to key positions 0..t only
    y_h   = att_h v_h                                (B, T, hd)
  y = concat_h y_h (head h in columns h*hd ..)       (B, T, D)
  out = y·proj.kernel + proj.bias                    (B, T, D)
Gradients: torch.autograd of L = sum(out * d_out): d_x and the gradient of
each of the four parameters (under "grads", same names and shapes).

The expected values come from the formula above written out; the script also
checks them, out and every gradient, against torch.nn.MultiheadAttention
(in_proj_weight = qkv.kernel^T, out_proj.weight = proj.kernel^T, a boolean
causal attn_mask) to 1e-12, so the layout above is the one a standard
implementation agrees with.

Every array is stored as {"shape": [...], "values": [...]} with the values
flattened row-major (C order). Parameters are drawn N(0, 1) * PARAM_SCALE so
that the softmax is not saturated (each case records its largest attention
weight off the first position, "max_attention_weight").

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  /usr/bin/python3 tests/reference/attention_reference.py
"""

import json
import math
import pathlib

import numpy as np
import torch

PARAM_SCALE = 0.3
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-5

generator = np.random.default_rng(20240611)


def float32_uniform(shape, low=-1.0, high=1.0):
    """Uniform draws rounded to float32, returned as float64."""
    return generator.uniform(low, high, size=shape).astype(np.float32).astype(np.float64)


def float32_normal(shape, scale):
    """N(0, scale^2) draws rounded to float32, returned as float64."""
    return (generator.standard_normal(size=shape) * scale).astype(np.float32).astype(np.float64)


def array(tensor):
    tensor = tensor.detach()
    return {"shape": list(tensor.shape), "values": [float(v) for v in tensor.reshape(-1).tolist()]}


def causal_self_attention(x, params, heads):
    """The layer as documented above; x and params in any one floating dtype."""
    batch, steps, width = x.shape
    head_width = width // heads
    qkv = x @ params["qkv.kernel"] + params["qkv.bias"]
    q, k, v = qkv[..., 0:width], qkv[..., width:2 * width], qkv[..., 2 * width:3 * width]
    # (B, T, D) -> (B, H, T, hd): head h takes columns h*hd .. (h+1)*hd - 1.
    q, k, v = (t.reshape(batch, steps, heads, head_width).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_width)
    allowed = torch.tril(torch.ones(steps, steps, dtype=torch.bool))
    scores = scores.masked_fill(~allowed, float("-inf"))
    attention = torch.softmax(scores, dim=-1)
    y = (attention @ v).transpose(1, 2).reshape(batch, steps, width)
    return y @ params["proj.kernel"] + params["proj.bias"], attention


def multihead_attention_check(x, params, heads):
    """The same layer through torch.nn.MultiheadAttention, float64; returns (out, module)."""
    width = x.shape[-1]
    module = torch.nn.MultiheadAttention(width, heads, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        module.in_proj_weight.copy_(params["qkv.kernel"].T)
        module.in_proj_bias.copy_(params["qkv.bias"])
        module.out_proj.weight.copy_(params["proj.kernel"].T)
        module.out_proj.bias.copy_(params["proj.bias"])
    steps = x.shape[1]
    blocked = ~torch.tril(torch.ones(steps, steps, dtype=torch.bool))  # True: may not attend
    out, _ = module(x, x, x, attn_mask=blocked, need_weights=False)
    return out, module


def case(name, batch, steps, width, heads):
    assert width % heads == 0
    x = torch.tensor(float32_uniform((batch, steps, width)), requires_grad=True)
    params = {
        "qkv.kernel": torch.tensor(float32_normal((width, 3 * width), PARAM_SCALE), requires_grad=True),
        "qkv.bias": torch.tensor(float32_normal((3 * width,), PARAM_SCALE), requires_grad=True),
        "proj.kernel": torch.tensor(float32_normal((width, width), PARAM_SCALE), requires_grad=True),
        "proj.bias": torch.tensor(float32_normal((width,), PARAM_SCALE), requires_grad=True),
    }
    d_out = torch.tensor(float32_uniform((batch, steps, width)))

    out, attention = causal_self_attention(x, params, heads)
    (out * d_out).sum().backward()

    # Cross-check: nn.MultiheadAttention, forward and backward.
    x_check = x.detach().clone().requires_grad_(True)
    out_check, module = multihead_attention_check(x_check, {n: p.detach() for n, p in params.items()}, heads)
    (out_check * d_out).sum().backward()
    assert torch.allclose(out, out_check, rtol=0, atol=1e-12), name
    assert torch.allclose(x.grad, x_check.grad, rtol=0, atol=1e-12), name
    for mine, theirs in [(params["qkv.kernel"].grad, module.in_proj_weight.grad.T),
                         (params["qkv.bias"].grad, module.in_proj_bias.grad),
                         (params["proj.kernel"].grad, module.out_proj.weight.grad.T),
                         (params["proj.bias"].grad, module.out_proj.bias.grad)]:
        assert torch.allclose(mine, theirs, rtol=0, atol=1e-12), name

    # The same in float32, for the record.
    x32 = x.detach().float().requires_grad_(True)
    params32 = {n: p.detach().float().requires_grad_(True) for n, p in params.items()}
    out32, _ = causal_self_attention(x32, params32, heads)
    (out32 * d_out.float()).sum().backward()
    float32_error = max([(out32.double() - out).abs().max().item(), (x32.grad.double() - x.grad).abs().max().item()]
                        + [(params32[n].grad.double() - params[n].grad).abs().max().item() for n in params])

    max_weight = attention[:, :, 1:, :].max().item() if steps > 1 else 1.0
    return {
        "name": name,
        "batch": batch, "seq_len": steps, "d_model": width, "heads": heads, "head_width": width // heads,
        "x": array(x),
        "params": {n: array(p) for n, p in params.items()},
        "d_out": array(d_out),
        "out": array(out),
        "d_x": array(x.grad),
        "grads": {n: array(p.grad) for n, p in params.items()},
        "max_attention_weight": max_weight,
        "float32_max_abs_error": float32_error,
    }


def main():
    torch.set_default_dtype(torch.float64)
    document = {
        "generated_by": "tests/reference/attention_reference.py",
        "torch_version": torch.__version__,
        "precision": "inputs are float32 values; expected values computed in float64",
        "layout": "arrays are {shape, values} with values row-major; kernels are (in, out), y = x . kernel + bias",
        "loss": "L = sum(out * d_out); d_x and grads are dL/dx and dL/dparam",
        "relative_tolerance": RELATIVE_TOLERANCE,
        "absolute_tolerance": ABSOLUTE_TOLERANCE,
        "cases": [
            case("B=2, T=5, D=8, H=2", 2, 5, 8, 2),
            case("B=1, T=7, D=12, H=3", 1, 7, 12, 3),
            case("B=2, T=4, D=8, H=1", 2, 4, 8, 1),
        ],
    }
    path = pathlib.Path(__file__).with_name("attention.json")
    path.write_text(json.dumps(document, indent=1) + "\n")
    for c in document["cases"]:
        print(f"{c['name']}: max attention weight {c['max_attention_weight']:.3f}, "
              f"float32 max abs error {c['float32_max_abs_error']:.2e}")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
