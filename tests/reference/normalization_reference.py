#!/usr/bin/env python3
"""Writes normalization.json: what typeflow's layer_norm and batch_norm must compute.

Every input (x, gamma, beta, the starting moving statistics, the upstream
gradient d_out) is drawn from a seeded generator and rounded to float32, so
the C++ test can hold exactly the same values. The expected values are then
computed by PyTorch in float64 from those float32 inputs and stored as
float64 numbers; the C++ layers compute in float32, so the test compares them
with a relative tolerance (RELATIVE_TOLERANCE) plus a small absolute floor.

  layer_norm:  torch.nn.functional.layer_norm(x, (n,), gamma, beta, eps=1e-3)
  batch_norm:  torch.nn.functional.batch_norm(x, None, None, gamma, beta,
               training=True, eps=1e-3) over every axis but the last (the
               input is viewed as (rows, n) first; the channel axis of
               torch's batch_norm is axis 1, which a (rows, n) view makes the
               last one)
  gradients:   torch.autograd of L = sum(y * d_out): d_in, d_gamma, d_beta

The moving statistics follow Keras 3's rule, written out here:
  moving_mean     = moving_mean     * momentum + batch_mean * (1 - momentum)
  moving_variance = moving_variance * momentum + batch_var  * (1 - momentum)
with the biased batch variance (divided by rows). For the record, each batch
case also stores what torch's own running statistics become with the
equivalent momentum (torch_momentum = 1 - momentum): torch_running_mean equals
Keras's, but torch_running_var uses the unbiased variance (divided by
rows - 1), so it differs.

The inference case normalises with the moving statistics
(torch.nn.functional.batch_norm with training=False).

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  /usr/bin/python3 tests/reference/normalization_reference.py
"""

import json
import pathlib

import numpy as np
import torch
import torch.nn.functional as F

EPSILON = 1e-3          # Keras's default for both layers
MOMENTUM = 0.99         # Keras's BatchNormalization default
RELATIVE_TOLERANCE = 1e-5
ABSOLUTE_TOLERANCE = 1e-6

generator = np.random.default_rng(20240607)


def float32_values(shape, low=-1.0, high=1.0):
    """Uniform draws rounded to float32, returned as float64."""
    return generator.uniform(low, high, size=shape).astype(np.float32).astype(np.float64)


def flat(tensor):
    return [float(v) for v in tensor.detach().reshape(-1).tolist()]


def layer_norm_case(name, input_shape):
    n = input_shape[-1]
    x = torch.tensor(float32_values(input_shape, -1.5, 2.5), requires_grad=True)
    gamma = torch.tensor(float32_values((n,), 0.5, 1.5), requires_grad=True)
    beta = torch.tensor(float32_values((n,)), requires_grad=True)
    d_out = torch.tensor(float32_values(input_shape))
    y = F.layer_norm(x, (n,), gamma, beta, eps=EPSILON)
    (y * d_out).sum().backward()
    return {
        "name": name,
        "input_shape": list(input_shape),
        "epsilon": EPSILON,
        "x": flat(x), "gamma": flat(gamma), "beta": flat(beta), "d_out": flat(d_out),
        "y": flat(y), "d_in": flat(x.grad), "d_gamma": flat(gamma.grad), "d_beta": flat(beta.grad),
    }


def batch_norm_case(name, input_shape):
    n = input_shape[-1]
    x = torch.tensor(float32_values(input_shape, -3.7, 2.3), requires_grad=True)
    gamma = torch.tensor(float32_values((n,), 0.5, 1.5), requires_grad=True)
    beta = torch.tensor(float32_values((n,)), requires_grad=True)
    moving_mean = torch.tensor(float32_values((n,)))
    moving_variance = torch.tensor(float32_values((n,), 0.5, 2.0))
    d_out = torch.tensor(float32_values(input_shape))

    rows = x.reshape(-1, n)
    y = F.batch_norm(rows, None, None, gamma, beta, training=True, eps=EPSILON).reshape(input_shape)
    (y * d_out).sum().backward()

    # Keras 3's moving statistics, from the biased batch variance.
    batch_mean = rows.detach().mean(dim=0)
    batch_variance = rows.detach().var(dim=0, unbiased=False)
    keras_moving_mean = moving_mean * MOMENTUM + batch_mean * (1.0 - MOMENTUM)
    keras_moving_variance = moving_variance * MOMENTUM + batch_variance * (1.0 - MOMENTUM)

    # torch's own running statistics with the equivalent momentum.
    torch_running_mean, torch_running_var = moving_mean.clone(), moving_variance.clone()
    F.batch_norm(rows.detach(), torch_running_mean, torch_running_var, gamma.detach(), beta.detach(),
                 training=True, momentum=1.0 - MOMENTUM, eps=EPSILON)
    assert torch.allclose(torch_running_mean, keras_moving_mean, rtol=1e-12, atol=0)
    count = rows.shape[0]
    assert torch.allclose(torch_running_var,
                          moving_variance * MOMENTUM + batch_variance * count / (count - 1) * (1.0 - MOMENTUM),
                          rtol=1e-12, atol=0)

    # Inference: the (starting) moving statistics in place of the batch's.
    inference_y = F.batch_norm(rows.detach(), moving_mean.clone(), moving_variance.clone(), gamma.detach(),
                               beta.detach(), training=False, eps=EPSILON).reshape(input_shape)

    return {
        "name": name,
        "input_shape": list(input_shape),
        "epsilon": EPSILON,
        "momentum": MOMENTUM,
        "x": flat(x), "gamma": flat(gamma), "beta": flat(beta), "d_out": flat(d_out),
        "moving_mean": flat(moving_mean), "moving_variance": flat(moving_variance),
        "y": flat(y), "d_in": flat(x.grad), "d_gamma": flat(gamma.grad), "d_beta": flat(beta.grad),
        "batch_mean": flat(batch_mean), "batch_variance": flat(batch_variance),
        "keras_moving_mean": flat(keras_moving_mean), "keras_moving_variance": flat(keras_moving_variance),
        "torch_running_mean": flat(torch_running_mean), "torch_running_var": flat(torch_running_var),
        "inference_y": flat(inference_y),
    }


def main():
    torch.set_default_dtype(torch.float64)
    document = {
        "generated_by": "tests/reference/normalization_reference.py",
        "torch_version": torch.__version__,
        "precision": "inputs are float32 values; expected values computed in float64",
        "relative_tolerance": RELATIVE_TOLERANCE,
        "absolute_tolerance": ABSOLUTE_TOLERANCE,
        "layer_norm": [
            layer_norm_case("batch 4, features 5", (4, 5)),
            layer_norm_case("batch 4, sample (3, 5)", (4, 3, 5)),
        ],
        "batch_norm": [
            batch_norm_case("batch 4, features 5", (4, 5)),
            batch_norm_case("batch 4, sample (3, 5)", (4, 3, 5)),
        ],
    }
    path = pathlib.Path(__file__).with_name("normalization.json")
    path.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
