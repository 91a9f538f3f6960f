#!/usr/bin/env python3
"""Writes conv.json: what typeflow's channels-last conv2d, depthwise_conv2d and
pooling layers must compute.

Every input (x, the parameters, the upstream gradient d_out) is a multiple of
1/64 in [-2, 2] (parameters: of 1/128 in [-1, 1]), exact in float32 and short
in the file, drawn from a seeded generator, so the C++ test holds exactly the
same values. For the max pooling cases x is a permutation of distinct
multiples of 1/64, so no window has a tie. The convolutions' products and
sums of such values are exact in float32 as well, so float32 misses most
expected values by nothing; what the tolerance is for is the averages'
divisions and the rounding of whatever scaling the test puts on d_out. The expected values are computed
by PyTorch in float64 and stored as float64 numbers; the C++ layers compute
in float32, so the test compares them with a relative tolerance
(RELATIVE_TOLERANCE) plus a small absolute floor (ABSOLUTE_TOLERANCE). For
scale, each case records how far PyTorch's own float32 computation of the
same thing lands from the float64 values ("float32_max_abs_error", the
largest over y, d_x and every gradient).

Layout (Keras's, channels last; every array is {"shape": [...], "values":
[...]} with the values flattened row-major):
  x, d_x:                  (B, H, W, C)
  y, d_out:                (B, Hout, Wout, F)
  conv2d kernel:           (kh, kw, C, F)     bias: (F)
  depthwise_kernel:        (kh, kw, C, M)     bias: (C * M); output channel
                           c * M + m is input channel c convolved with
                           depthwise_kernel[:, :, c, m]
PyTorch is channels-first with symmetric padding, so the script permutes
NHWC <-> NCHW and pads explicitly with F.pad, by Keras's (TensorFlow's) rule:
  valid: out = (in - d * (k - 1) - 1) // stride + 1, no padding
  same:  out = ceil(in / stride)
         total = max((out - 1) * stride + d * (k - 1) + 1 - in, 0)
         top/left = total // 2, bottom/right = total - top/left
with zeros for the convolutions and -inf for max pooling; average pooling
with 'same' padding averages the in-bounds elements only (avg_pool2d of the
zero-padded x divided by avg_pool2d of a zero-padded ones mask). The kernels
map to torch's weights as
  conv2d:    weight[f, c, i, j] = kernel[i, j, c, f]
  depthwise: weight[c * M + m, 0, i, j] = depthwise_kernel[i, j, c, m],
             groups = C
Gradients: torch.autograd of L = sum(y * d_out): d_x and the gradient of
every parameter (under "grads", same names and shapes as "params").

The script checks every case's y against a direct loop over the output
positions in numpy (the definitions above written out, channels last) to
1e-12, so the padding and the layouts are the ones a plain reading of Keras's
rule gives.

The test suite reads only the JSON; run this (python3 with torch) to regenerate:
  /usr/bin/python3 tests/reference/conv_reference.py
"""

import json
import math
import pathlib

import numpy as np
import torch
import torch.nn.functional as F

RELATIVE_TOLERANCE = 1e-5
ABSOLUTE_TOLERANCE = 1e-5
BATCH = 2

generator = np.random.default_rng(20240615)


def grid_values(shape, steps, limit):
    """Uniform draws from the multiples of 1/steps in [-limit, limit]: exact in float32."""
    return generator.integers(-limit * steps, limit * steps, size=shape, endpoint=True).astype(np.float64) / steps


def distinct_values(shape):
    """A permutation of distinct multiples of 1/64 around 0 (no ties for max pooling)."""
    n = int(np.prod(shape))
    values = (generator.permutation(n) - n // 2).astype(np.float64) / 64
    assert np.abs(values).max() <= 4
    return values.reshape(shape)


def array(tensor):
    tensor = tensor.detach()
    return {"shape": list(tensor.shape), "values": [float(v) for v in tensor.reshape(-1).tolist()]}


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def output_and_padding(size, kernel, stride, dilation, padding):
    """Keras's output length and (before, after) padding along one axis."""
    extent = dilation * (kernel - 1) + 1
    if padding == "valid":
        return (size - extent) // stride + 1, (0, 0)
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + extent - size, 0)
    return out, (total // 2, total - total // 2)


def geometry(x_shape, kernel, stride, dilation, padding):
    (_, h, w, _), (kh, kw), (sh, sw), (dh, dw) = x_shape, kernel, stride, dilation
    out_h, pad_h = output_and_padding(h, kh, sh, dh, padding)
    out_w, pad_w = output_and_padding(w, kw, sw, dw, padding)
    return (out_h, out_w), pad_h, pad_w


def to_nchw(x):
    return x.permute(0, 3, 1, 2)


def to_nhwc(x):
    return x.permute(0, 2, 3, 1)


def padded(x_nchw, pad_h, pad_w, value=0.0):
    return F.pad(x_nchw, (pad_w[0], pad_w[1], pad_h[0], pad_h[1]), value=value)


# ---------------------------------------------------------------------------
# The layers in torch (any one floating dtype; x channels last).

def conv2d(x, p, spec):
    _, pad_h, pad_w = geometry(x.shape, spec["kernel"], spec["strides"], spec["dilation"], spec["padding"])
    weight = p["kernel"].permute(3, 2, 0, 1)  # (kh, kw, C, F) -> (F, C, kh, kw)
    y = F.conv2d(padded(to_nchw(x), pad_h, pad_w), weight, p.get("bias"), stride=spec["strides"],
                 dilation=spec["dilation"])
    return to_nhwc(y)


def depthwise_conv2d(x, p, spec):
    _, pad_h, pad_w = geometry(x.shape, spec["kernel"], spec["strides"], spec["dilation"], spec["padding"])
    kh, kw, channels, multiplier = p["depthwise_kernel"].shape
    # (kh, kw, C, M) -> (C, M, kh, kw) -> (C * M, 1, kh, kw): output channel c * M + m.
    weight = p["depthwise_kernel"].permute(2, 3, 0, 1).reshape(channels * multiplier, 1, kh, kw)
    y = F.conv2d(padded(to_nchw(x), pad_h, pad_w), weight, p.get("bias"), stride=spec["strides"],
                 dilation=spec["dilation"], groups=channels)
    return to_nhwc(y)


def max_pooling2d(x, p, spec):
    _, pad_h, pad_w = geometry(x.shape, spec["pool"], spec["strides"], (1, 1), spec["padding"])
    y = F.max_pool2d(padded(to_nchw(x), pad_h, pad_w, value=float("-inf")), spec["pool"], spec["strides"])
    return to_nhwc(y)


def average_pooling2d(x, p, spec):
    _, pad_h, pad_w = geometry(x.shape, spec["pool"], spec["strides"], (1, 1), spec["padding"])
    sums = F.avg_pool2d(padded(to_nchw(x), pad_h, pad_w), spec["pool"], spec["strides"])
    ones = torch.ones_like(to_nchw(x)[:1, :1])
    counts = F.avg_pool2d(padded(ones, pad_h, pad_w), spec["pool"], spec["strides"])
    return to_nhwc(sums / counts)


def global_average_pooling2d(x, p, spec):
    return x.mean(dim=(1, 2))


LAYERS = {
    "conv2d": conv2d,
    "depthwise_conv2d": depthwise_conv2d,
    "max_pooling2d": max_pooling2d,
    "average_pooling2d": average_pooling2d,
    "global_average_pooling2d": global_average_pooling2d,
}


# ---------------------------------------------------------------------------
# The same definitions as direct loops in numpy, channels last, as a check.

def windows(x_shape, kernel, stride, dilation, padding):
    """Yields (oh, ow, [(h, w) in-bounds input positions of the window, with (i, j) kernel taps])."""
    (out_h, out_w), pad_h, pad_w = geometry(x_shape, kernel, stride, dilation, padding)
    _, h, w, _ = x_shape
    for oh in range(out_h):
        for ow in range(out_w):
            taps = []
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    r = oh * stride[0] - pad_h[0] + i * dilation[0]
                    c = ow * stride[1] - pad_w[0] + j * dilation[1]
                    if 0 <= r < h and 0 <= c < w:
                        taps.append((r, c, i, j))
            yield oh, ow, taps


def loop_reference(kind, x, p, spec):
    batch, h, w, channels = x.shape
    if kind == "global_average_pooling2d":
        return x.mean(axis=(1, 2))
    window = spec["kernel"] if kind in ("conv2d", "depthwise_conv2d") else spec["pool"]
    dilation = spec.get("dilation", (1, 1))
    (out_h, out_w), _, _ = geometry(x.shape, window, spec["strides"], dilation, spec["padding"])
    if kind == "conv2d":
        filters = p["kernel"].shape[3]
    elif kind == "depthwise_conv2d":
        filters = channels * p["depthwise_kernel"].shape[3]
    else:
        filters = channels
    y = np.zeros((batch, out_h, out_w, filters))
    for b in range(batch):
        for oh, ow, taps in windows(x.shape, window, spec["strides"], dilation, spec["padding"]):
            for f in range(filters):
                if kind == "conv2d":
                    value = sum(x[b, r, c, ch] * p["kernel"][i, j, ch, f]
                                for r, c, i, j in taps for ch in range(channels))
                    value += p["bias"][f] if "bias" in p else 0.0
                elif kind == "depthwise_conv2d":
                    multiplier = p["depthwise_kernel"].shape[3]
                    ch, m = divmod(f, multiplier)
                    value = sum(x[b, r, c, ch] * p["depthwise_kernel"][i, j, ch, m] for r, c, i, j in taps)
                    value += p["bias"][f] if "bias" in p else 0.0
                elif kind == "max_pooling2d":
                    value = max(x[b, r, c, f] for r, c, _, _ in taps)
                else:  # average_pooling2d: in-bounds elements only
                    value = sum(x[b, r, c, f] for r, c, _, _ in taps) / len(taps)
                y[b, oh, ow, f] = value
    return y


# ---------------------------------------------------------------------------

def case(name, kind, typeflow, input_shape, spec, param_shapes, distinct=False):
    """One case: `typeflow` is the layer as the C++ test spells it (for the record)."""
    shape = (BATCH, *input_shape)
    spec = {k: pair(v) if k in ("kernel", "strides", "dilation", "pool") else v for k, v in spec.items()}
    x = torch.tensor(distinct_values(shape) if distinct else grid_values(shape, 64, 2), requires_grad=True)
    params = {n: torch.tensor(grid_values(s, 128, 1), requires_grad=True) for n, s in param_shapes.items()}
    layer = LAYERS[kind]

    y = layer(x, params, spec)
    d_out = torch.tensor(grid_values(tuple(y.shape), 64, 2))
    (y * d_out).sum().backward()

    expected = loop_reference(kind, x.detach().numpy(), {n: t.detach().numpy() for n, t in params.items()}, spec)
    assert expected.shape == tuple(y.shape), name
    assert np.abs(expected - y.detach().numpy()).max() <= 1e-12, name
    if kind == "max_pooling2d":
        # No ties: every window's largest element is strictly larger than the rest.
        assert len(set(x.detach().reshape(-1).tolist())) == x.numel(), name

    # The same in float32, for the record.
    x32 = x.detach().float().requires_grad_(True)
    params32 = {n: t.detach().float().requires_grad_(True) for n, t in params.items()}
    y32 = layer(x32, params32, spec)
    (y32 * d_out.float()).sum().backward()
    float32_error = max([(y32.double() - y).abs().max().item(), (x32.grad.double() - x.grad).abs().max().item()]
                        + [(params32[n].grad.double() - params[n].grad).abs().max().item() for n in params])

    return {
        "name": name,
        "layer": kind,
        "typeflow": typeflow,
        "input_shape": list(input_shape),
        "output_shape": list(y.shape[1:]),
        "x": array(x),
        "params": {n: array(t) for n, t in params.items()},
        "d_out": array(d_out),
        "y": array(y),
        "d_x": array(x.grad),
        "grads": {n: array(t.grad) for n, t in params.items()},
        "float32_max_abs_error": float32_error,
    }


def cases():
    return [
        case("conv2d valid 3x3, 4 filters, bias", "conv2d", "conv2d<4, 3>",
             (7, 6, 3), {"kernel": 3, "strides": 1, "dilation": 1, "padding": "valid"},
             {"kernel": (3, 3, 3, 4), "bias": (4,)}),
        case("conv2d same, kernel (3, 2), strides 2", "conv2d", "conv2d<5, window{3, 2}, 2, padding::same>",
             (7, 6, 3), {"kernel": (3, 2), "strides": 2, "dilation": 1, "padding": "same"},
             {"kernel": (3, 2, 3, 5), "bias": (5,)}),
        case("conv2d valid 3x3, dilation 2, no bias", "conv2d",
             "conv2d<4, 3, 1, padding::valid, dilation<2>, use_bias<false>>",
             (8, 7, 3), {"kernel": 3, "strides": 1, "dilation": 2, "padding": "valid"},
             {"kernel": (3, 3, 3, 4)}),
        case("conv2d same 4x4 (even kernel), strides 1", "conv2d", "conv2d<3, 4, 1, padding::same>",
             (7, 6, 3), {"kernel": 4, "strides": 1, "dilation": 1, "padding": "same"},
             {"kernel": (4, 4, 3, 3), "bias": (3,)}),
        case("depthwise_conv2d same 3x3, depth multiplier 2", "depthwise_conv2d",
             "depthwise_conv2d<3, 1, padding::same, depth_multiplier<2>>",
             (7, 6, 3), {"kernel": 3, "strides": 1, "dilation": 1, "padding": "same"},
             {"depthwise_kernel": (3, 3, 3, 2), "bias": (6,)}),
        case("max_pooling2d valid pool 2", "max_pooling2d", "max_pooling2d<2>",
             (7, 6, 3), {"pool": 2, "strides": 2, "padding": "valid"}, {}, distinct=True),
        case("max_pooling2d same pool 3, strides 2", "max_pooling2d", "max_pooling2d<3, 2, padding::same>",
             (7, 6, 3), {"pool": 3, "strides": 2, "padding": "same"}, {}, distinct=True),
        case("average_pooling2d same pool 3, strides 2", "average_pooling2d",
             "average_pooling2d<3, 2, padding::same>",
             (7, 6, 3), {"pool": 3, "strides": 2, "padding": "same"}, {}),
        case("global_average_pooling2d", "global_average_pooling2d", "global_average_pooling2d",
             (7, 6, 3), {}, {}),
    ]


def dumps(document):
    """JSON with one array of numbers per line (indent=1 everywhere else), to keep the file small."""
    def encode(value, depth):
        pad = " " * depth
        if isinstance(value, dict):
            items = [f'{pad} {json.dumps(k)}: {encode(v, depth + 1)}' for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
        if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            items = [f"{pad} {encode(v, depth + 1)}" for v in value]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        return json.dumps(value)
    return encode(document, 0)


def main():
    torch.set_default_dtype(torch.float64)
    document = {
        "generated_by": "tests/reference/conv_reference.py",
        "torch_version": torch.__version__,
        "precision": "inputs are float32 values (multiples of 1/64 or 1/128); expected values computed in float64",
        "layout": "channels last; arrays are {shape, values} with values row-major; "
                  "conv2d kernel (kh, kw, C, F), depthwise_kernel (kh, kw, C, M), output channel c * M + m",
        "padding": "Keras: same gives ceil(in / stride), total = max((out - 1) * stride + d * (k - 1) + 1 - in, 0), "
                   "top/left = total // 2; average pooling averages the in-bounds elements only",
        "loss": "L = sum(y * d_out); d_x and grads are dL/dx and dL/dparam",
        "batch": BATCH,
        "relative_tolerance": RELATIVE_TOLERANCE,
        "absolute_tolerance": ABSOLUTE_TOLERANCE,
        "cases": cases(),
    }
    path = pathlib.Path(__file__).with_name("conv.json")
    path.write_text(dumps(document) + "\n")
    assert json.loads(path.read_text()) == document
    for c in document["cases"]:
        print(f"{c['name']}: {c['input_shape']} -> {c['output_shape']}, "
              f"float32 max abs error {c['float32_max_abs_error']:.2e}")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
