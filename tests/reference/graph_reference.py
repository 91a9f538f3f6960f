#!/usr/bin/env python3
"""Writes graph.json: what a typeflow graph with every merge and a shared layer must compute.

The network (functional_test.cpp's reference_net), for a batch of 8 samples of 6 features:

  h    = tanh(x @ W1 + b1)                         layers.1 (dense<8>, tanh): the graph's input
  a    = h @ Wa + ba;  at = tanh(a)                node a, node at
  b    = at @ Wa + ba                              node b: node a's layer again (shared<"a">)
  m    = at * b * h                                multiply, three inputs
  xm   = maximum(m, h)                             maximum
  d    = xm - b                                    subtract
  avg  = (d + at + h) / 3                          average, three inputs
  n    = minimum(minimum(avg, b), m)               minimum, three inputs
  dp   = sum(at * b, axis=1, keepdims)             dot: (8, 1)
  cat  = [n, b, dp]                                concatenate: (8, 17)
  ln   = layer_norm(cat) * gamma + beta            eps 1e-3 (Keras's default)
  s    = ln + ln                                   add, one node read twice
  out  = s @ Wo + bo                               logits (8, 4)
  loss = mean sparse categorical cross-entropy from logits

Inputs and weights are drawn from a seeded generator and rounded to float32;
PyTorch computes the loss and every parameter's gradient in float64. Kernels
are stored as Keras stores them, (in, out). The test compares typeflow's
float32 results with a relative tolerance. No two inputs of maximum or
minimum come within 1e-3 of each other, so no gradient depends on how ties
are broken.

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  /usr/bin/python3 tests/reference/graph_reference.py
"""

import json
import pathlib

import numpy as np
import torch

generator = np.random.default_rng(20261202)
torch.set_default_dtype(torch.float64)


def float32_values(shape, scale=1.0):
    return (generator.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32).astype(np.float64)


def flat(tensor):
    return [float(v) for v in tensor.detach().reshape(-1).tolist()]


x = torch.tensor(float32_values((8, 6)))
labels = torch.tensor([(3 * i + 1) % 4 for i in range(8)])
shapes = {
    "layers.1.kernel": (6, 8), "layers.1.bias": (8,),
    "layers.3.a.kernel": (8, 8), "layers.3.a.bias": (8,),
    "layers.3.ln.gamma": (17,), "layers.3.ln.beta": (17,),
    "layers.3.out.kernel": (17, 4), "layers.3.out.bias": (4,),
}
weights = {name: torch.tensor(float32_values(shape, 0.8), requires_grad=True) for name, shape in shapes.items()}
weights["layers.3.ln.gamma"].data += 1.0


def forward(w):
    h = torch.tanh(x @ w["layers.1.kernel"] + w["layers.1.bias"])
    at = torch.tanh(h @ w["layers.3.a.kernel"] + w["layers.3.a.bias"])
    b = at @ w["layers.3.a.kernel"] + w["layers.3.a.bias"]
    m = at * b * h
    xm = torch.maximum(m, h)
    d = xm - b
    avg = (d + at + h) / 3
    n = torch.minimum(torch.minimum(avg, b), m)
    dp = (at * b).sum(dim=1, keepdim=True)
    cat = torch.cat([n, b, dp], dim=1)
    ln = torch.nn.functional.layer_norm(cat, (17,), w["layers.3.ln.gamma"], w["layers.3.ln.beta"], eps=1e-3)
    s = ln + ln
    logits = s @ w["layers.3.out.kernel"] + w["layers.3.out.bias"]
    gaps = [(m - h).abs().min(), (avg - b).abs().min(), (torch.minimum(avg, b) - m).abs().min()]
    return torch.nn.functional.cross_entropy(logits, labels), min(float(g) for g in gaps)


loss, closest = forward(weights)
assert closest > 1e-3, f"a maximum or minimum has inputs within {closest}: draw again"
loss.backward()

out = {
    "features": flat(x),
    "labels": labels.tolist(),
    "weights": {name: flat(w) for name, w in weights.items()},
    "loss": float(loss),
    "gradients": {name: flat(w.grad) for name, w in weights.items()},
}
path = pathlib.Path(__file__).with_name("graph.json")
path.write_text(json.dumps(out, indent=1) + "\n")
print(f"wrote {path}: loss {float(loss):.6f}, closest max/min inputs {closest:.2e}")
