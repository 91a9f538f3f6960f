#!/usr/bin/env python3
"""Writes functional_io.json: what a typeflow graph with two inputs, a shared
layer, a concatenation and two outputs with weighted losses must compute.

The network (functional_io_test.cpp's two_io), for a batch of 8 samples:

  image (8,) float32, ids (2,) int32                  the two inputs
  e        = E[ids]                                   node emb: embedding<10, 4>, (2, 4)
  flat     = e.reshape(8)                             node flat
  proj     = tanh(image @ W + b)                      node proj: sequential<dense<6>, tanh>
  proj_ids = tanh(flat @ W + b)                       node proj_ids: shared<"proj">, the same W and b
  both     = [proj, proj_ids]                         concatenate: (12)
  class    = both @ Wc + bc                           output "class", logits (5)
  value    = both @ Wv + bv                           output "value" (2)
  loss     = 0.7 * CE(class, class ids) + 0.3 * MSE(value, targets)

Keras's names for the per-output losses: class_loss (the mean cross-entropy)
and value_loss (the mean squared error), unweighted. Inputs, labels and
weights are drawn from a seeded generator and rounded to float32; PyTorch
computes in float64. Kernels are stored as Keras stores them, (in, out).

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  /usr/bin/python3 tests/reference/functional_io_reference.py
"""

import json
import pathlib

import numpy as np
import torch

generator = np.random.default_rng(20261203)
torch.set_default_dtype(torch.float64)


def float32_values(shape, scale=1.0):
    return (generator.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32).astype(np.float64)


def flat(tensor):
    return [float(v) for v in tensor.detach().reshape(-1).tolist()]


image = torch.tensor(float32_values((8, 8)))
ids = torch.tensor(generator.integers(0, 10, size=(8, 2)))
classes = torch.tensor(generator.integers(0, 5, size=(8,)))
targets = torch.tensor(float32_values((8, 2)))
shapes = {
    "emb.embeddings": (10, 4),
    "proj.dense.kernel": (8, 6), "proj.dense.bias": (6,),
    "class.kernel": (12, 5), "class.bias": (5,),
    "value.kernel": (12, 2), "value.bias": (2,),
}
weights = {name: torch.tensor(float32_values(shape, 0.8), requires_grad=True) for name, shape in shapes.items()}

e = weights["emb.embeddings"][ids].reshape(8, 8)
proj = torch.tanh(image @ weights["proj.dense.kernel"] + weights["proj.dense.bias"])
proj_ids = torch.tanh(e @ weights["proj.dense.kernel"] + weights["proj.dense.bias"])
both = torch.cat([proj, proj_ids], dim=1)
logits = both @ weights["class.kernel"] + weights["class.bias"]
value = both @ weights["value.kernel"] + weights["value.bias"]
class_loss = torch.nn.functional.cross_entropy(logits, classes)
value_loss = torch.nn.functional.mse_loss(value, targets)
loss = 0.7 * class_loss + 0.3 * value_loss
loss.backward()

out = {
    "image": flat(image),
    "ids": ids.reshape(-1).tolist(),
    "classes": classes.tolist(),
    "targets": flat(targets),
    "weights": {name: flat(w) for name, w in weights.items()},
    "loss": float(loss),
    "class_loss": float(class_loss),
    "value_loss": float(value_loss),
    "gradients": {name: flat(w.grad) for name, w in weights.items()},
}
path = pathlib.Path(__file__).with_name("functional_io.json")
path.write_text(json.dumps(out, indent=1) + "\n")
print(f"wrote {path}: loss {float(loss):.6f} (class {float(class_loss):.6f}, value {float(value_loss):.6f})")
