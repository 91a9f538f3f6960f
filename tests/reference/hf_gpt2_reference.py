#!/usr/bin/env python3
"""Hugging Face's GPT-2, in plain PyTorch, against typeflow's hf_gpt2 layout.

Two jobs, with Debian's python3-torch and numpy only (no transformers, no
safetensors package: this script reads and writes the format by hand):

  /usr/bin/python3 tests/reference/hf_gpt2_reference.py
      writes the fixtures tests/unit/hf_gpt2_reference_test.cpp reads:
        hf_gpt2_model.safetensors     the model as transformers' save_pretrained
                                      writes GPT2LMHeadModel: names under
                                      "transformer.", float32, the attention
                                      buffers attn.bias (BOOL, (1, 1, P, P)) and
                                      attn.masked_bias (F32, ()), no lm_head.weight
                                      (tied to wte), metadata {"format": "pt"}
        hf_gpt2_expected.safetensors  "logits" (B, T, V) for hf_gpt2.json's tokens;
                                      "grad.<name>": d loss / d parameter for its
                                      targets (wte's holds the lookup's and the
                                      tied head's parts), named by Hugging Face
                                      without the prefix; "after_step.logits": the
                                      logits after one SGD step (no momentum) at
                                      hf_gpt2.json's learning_rate, w - rate * grad.
        hf_gpt2.json                  config, tokens, targets, loss, tolerances

  /usr/bin/python3 tests/reference/hf_gpt2_reference.py --check-export PATH
      reads PATH, a safetensors file typeflow wrote with hf_gpt2::save_options
      after that SGD step, as transformers would: metadata "format" must be
      "pt"; the base model's state dict loaded non-strictly, where only the
      attention buffers may be missing and nothing may be unexpected; every
      tensor F32 of the module's shape. Then it checks that the loaded module's
      logits for the tokens match "after_step.logits" to the tolerances, and
      exits 0, or prints what differs and exits 1.

The modules below are transformers' GPT2LMHeadModel (modeling_gpt2.py, eager
attention) with its module and parameter names: Conv1D keeps its weight
(in, out) and computes x . weight + bias; c_attn's output splits into q, k, v
thirds, each viewed as (heads, head width); the causal mask is the "bias"
buffer; gelu is the tanh approximation (gelu_new); LayerNorm epsilon 1e-5;
the head has no bias and shares wte's weight. No dropout (eval semantics).
The script checks its logits against a second, functional implementation
(functional_logits) to 1e-12 before writing anything.

Every parameter is drawn from a seeded generator and rounded to float32 (the
file holds those float32 values); the expected values are computed in
float64 from them, and stored rounded to float32. typeflow computes in
float32, so the test compares with RELATIVE_TOLERANCE plus an absolute floor
ABSOLUTE_TOLERANCE. The loss is the mean cross-entropy of the logits against
explicit targets at all B*T positions (transformers' labels= shift is the
data's job here).
"""

import argparse
import json
import math
import pathlib
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_LAYER, N_HEAD, N_EMBD, N_POSITIONS, VOCAB = 2, 3, 24, 16, 50
STEPS, BATCH = 12, 2          # the typeflow model reads 12 of the 16 positions
LAYER_NORM_EPSILON = 1e-5
LEARNING_RATE = 0.1
WEIGHT_SCALE = 0.2
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-5
PREFIX = "transformer."

HERE = pathlib.Path(__file__).resolve().parent
MODEL_FILE = HERE / "hf_gpt2_model.safetensors"
EXPECTED_FILE = HERE / "hf_gpt2_expected.safetensors"
JSON_FILE = HERE / "hf_gpt2.json"


# ---------------------------------------------------------------------------
# transformers' GPT-2, in plain torch
# ---------------------------------------------------------------------------

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer with its weight stored (in, out)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    """gelu_new, GPT-2's activation: the tanh approximation."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        max_positions = N_POSITIONS
        # Persistent, as in the transformers versions that wrote the published
        # checkpoints, so the file holds them as it would.
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
            1, 1, max_positions, max_positions))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.embed_dim = N_EMBD
        self.num_heads = N_HEAD
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = F.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor):
        return tensor.view(tensor.size()[:-1] + (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (self.num_heads * self.head_dim,))

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        return self.c_proj(self._merge_heads(self._attn(query, key, value)))


class GPT2MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(4 * N_EMBD, N_EMBD)
        self.c_proj = Conv1D(N_EMBD, 4 * N_EMBD)
        self.act = NewGELUActivation()

    def forward(self, hidden_states):
        return self.c_proj(self.act(self.c_fc(hidden_states)))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, eps=LAYER_NORM_EPSILON)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(N_EMBD, eps=LAYER_NORM_EPSILON)
        self.mlp = GPT2MLP()

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states))
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(N_POSITIONS, N_EMBD)
        self.h = nn.ModuleList([GPT2Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD, eps=LAYER_NORM_EPSILON)

    def forward(self, input_ids):
        position_ids = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            hidden_states = block(hidden_states)
        return self.ln_f(hidden_states)


class GPT2LMHeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = GPT2Model()
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tie_weights()

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


def parameter_names(model):
    """The base model's parameter names (no prefix), as the file lists them; lm_head is wte."""
    return [name for name, _ in model.transformer.named_parameters()]


def buffer_names(model):
    return [name for name, _ in model.transformer.named_buffers()]


# ---------------------------------------------------------------------------
# safetensors, by hand
# ---------------------------------------------------------------------------

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BOOL": np.bool_, "I32": np.int32, "I64": np.int64}
DTYPE_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def write_safetensors(path, tensors, metadata):
    """tensors: name -> numpy array, written in order; the header padded to 8 bytes, as the reference writer does."""
    header = {"__metadata__": metadata}
    offset, blobs = 0, []
    for name, value in tensors.items():
        value = np.asarray(value)  # not ascontiguousarray, which makes a scalar (1,)
        if not value.flags.c_contiguous:
            value = value.copy()
        data = value.astype(value.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPE_NAMES[value.dtype], "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """(metadata, name -> (dtype name, numpy array)); checks the data buffer is covered exactly."""
    raw = pathlib.Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    buffer = raw[8 + length:]
    metadata = header.pop("__metadata__", {})
    tensors, spans = {}, []
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        array = np.frombuffer(buffer[begin:end], dtype=np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"))
        tensors[name] = (entry["dtype"], array.reshape(entry["shape"]))
        spans.append((begin, end))
    covered = 0
    for begin, end in sorted(spans):
        assert begin == covered, f"{path}: the data buffer has a gap or an overlap at {begin}"
        covered = end
    assert covered == len(buffer), f"{path}: {len(buffer) - covered} bytes at the end belong to no tensor"
    return metadata, tensors


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

def draw_parameters(model, generator):
    """Fills model's parameters with seeded float32 values: weights N(0, 0.2^2), LayerNorm 1 + N(0, 0.1^2) and N(0, 0.1^2)."""
    with torch.no_grad():
        for name, parameter in model.transformer.named_parameters():
            if ".ln_" in name or name.startswith("ln_"):
                mean, scale = (1.0, 0.1) if name.endswith("weight") else (0.0, 0.1)
            else:
                mean, scale = 0.0, WEIGHT_SCALE
            values = (mean + generator.standard_normal(size=tuple(parameter.shape)) * scale).astype(np.float32)
            parameter.copy_(torch.from_numpy(values))


def functional_logits(model, tokens):
    """The same network again from torch.nn.functional, reading model's parameters:
    F.gelu(approximate="tanh"), a -inf mask, and the heads cut from q, k, v by hand."""
    p = dict(model.transformer.named_parameters())
    steps, width, head_width = tokens.shape[1], N_EMBD, N_EMBD // N_HEAD
    x = p["wte.weight"][tokens] + p["wpe.weight"][:steps]
    blocked = ~torch.tril(torch.ones(steps, steps, dtype=torch.bool))
    for i in range(N_LAYER):
        b = f"h.{i}."
        h = F.layer_norm(x, (width,), p[b + "ln_1.weight"], p[b + "ln_1.bias"], eps=LAYER_NORM_EPSILON)
        qkv = h @ p[b + "attn.c_attn.weight"] + p[b + "attn.c_attn.bias"]
        heads = []
        for head in range(N_HEAD):
            q, k, v = (qkv[..., third * width + head * head_width:third * width + (head + 1) * head_width]
                       for third in range(3))
            scores = (q @ k.transpose(-1, -2) / math.sqrt(head_width)).masked_fill(blocked, float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v)
        x = x + torch.cat(heads, dim=-1) @ p[b + "attn.c_proj.weight"] + p[b + "attn.c_proj.bias"]
        h = F.layer_norm(x, (width,), p[b + "ln_2.weight"], p[b + "ln_2.bias"], eps=LAYER_NORM_EPSILON)
        h = F.gelu(h @ p[b + "mlp.c_fc.weight"] + p[b + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ p[b + "mlp.c_proj.weight"] + p[b + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (width,), p["ln_f.weight"], p["ln_f.bias"], eps=LAYER_NORM_EPSILON)
    return x @ p["wte.weight"].T


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def generate():
    generator = np.random.default_rng(20251202)
    torch.manual_seed(0)
    model32 = GPT2LMHeadModel()
    draw_parameters(model32, generator)
    tokens = torch.tensor(generator.integers(0, VOCAB, size=(BATCH, STEPS)), dtype=torch.long)
    targets = torch.tensor(generator.integers(0, VOCAB, size=(BATCH, STEPS)), dtype=torch.long)

    # The file, as save_pretrained writes it: the state dict under "transformer.",
    # without lm_head.weight, which shares wte's storage.
    state = {PREFIX + n: t.detach().numpy() for n, t in model32.transformer.state_dict().items()}
    write_safetensors(MODEL_FILE, state, {"format": "pt"})

    # The expected values, in float64 from the float32 parameters.
    model = GPT2LMHeadModel().double()
    model.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in model32.state_dict().items()})
    assert model.lm_head.weight is model.transformer.wte.weight
    logits = model(tokens)
    with torch.no_grad():
        assert torch.allclose(logits, functional_logits(model, tokens), rtol=0, atol=1e-12)
    loss = loss_of(logits, targets)
    loss.backward()
    names = parameter_names(model)
    parameters = dict(model.transformer.named_parameters())
    grads = {n: parameters[n].grad.detach().clone() for n in names}

    # The same in float32, for scale.
    logits32 = model32(tokens)
    loss32 = loss_of(logits32, targets)
    loss32.backward()
    parameters32 = dict(model32.transformer.named_parameters())
    float32_error = max([(logits32.double() - logits).abs().max().item(), abs(loss32.item() - loss.item())] +
                        [(parameters32[n].grad.double() - grads[n]).abs().max().item() for n in names])

    torch.optim.SGD(model.parameters(), lr=LEARNING_RATE).step()
    with torch.no_grad():
        after_logits = model(tokens)
        after_loss = loss_of(after_logits, targets)

    f32 = lambda t: t.detach().numpy().astype(np.float32)
    expected = {"logits": f32(logits), "after_step.logits": f32(after_logits)}
    expected |= {"grad." + n: f32(grads[n]) for n in names}
    write_safetensors(EXPECTED_FILE, expected, {"generated_by": "tests/reference/hf_gpt2_reference.py"})

    document = {
        "generated_by": "tests/reference/hf_gpt2_reference.py",
        "torch_version": torch.__version__,
        "config": {"n_layer": N_LAYER, "n_head": N_HEAD, "n_embd": N_EMBD, "n_positions": N_POSITIONS,
                   "vocab_size": VOCAB, "layer_norm_epsilon": LAYER_NORM_EPSILON,
                   "activation_function": "gelu_new", "tie_word_embeddings": True},
        "steps": STEPS,
        "batch": BATCH,
        "learning_rate": LEARNING_RATE,
        "relative_tolerance": RELATIVE_TOLERANCE,
        "absolute_tolerance": ABSOLUTE_TOLERANCE,
        "parameters": names,
        "buffers": buffer_names(model),
        "tokens": tokens.reshape(-1).tolist(),
        "targets": targets.reshape(-1).tolist(),
        "loss": loss.item(),
        "after_step_loss": after_loss.item(),
        "float32_max_abs_error": float32_error,
        "largest_gradient": max(g.abs().max().item() for g in grads.values()),
    }
    JSON_FILE.write_text(json.dumps(document, indent=1) + "\n")
    print(f"loss {loss.item():.6f} (ln V = {math.log(VOCAB):.6f}), after one step {after_loss.item():.6f}; "
          f"largest gradient {document['largest_gradient']:.3e}; float32 max abs error {float32_error:.2e}")
    for path in (MODEL_FILE, EXPECTED_FILE, JSON_FILE):
        print(f"wrote {path} ({path.stat().st_size} bytes)")


# ---------------------------------------------------------------------------
# Checking typeflow's export
# ---------------------------------------------------------------------------

def check_export(path):
    document = json.loads(JSON_FILE.read_text())
    _, expected = read_safetensors(EXPECTED_FILE)
    metadata, tensors = read_safetensors(path)
    problems = []
    if metadata.get("format") != "pt":
        problems.append(f'metadata "format" is {metadata.get("format")!r}; transformers requires "pt"')

    model = GPT2LMHeadModel().double()
    module_state = model.transformer.state_dict()
    parameters = set(parameter_names(model))
    state, shapes_differ = {}, False
    for name, (dtype, array) in tensors.items():
        base = name[len(PREFIX):] if name.startswith(PREFIX) else name
        if base in module_state:
            if base in parameters and dtype != "F32":
                problems.append(f"{name}: dtype {dtype}, not F32")
            if tuple(array.shape) != tuple(module_state[base].shape):
                problems.append(f"{name}: shape {tuple(array.shape)}, the module's is {tuple(module_state[base].shape)}")
                shapes_differ = True
                continue
            state[base] = torch.from_numpy(array.copy()).to(module_state[base].dtype)
        else:
            state[base] = torch.from_numpy(array.copy())
    if not shapes_differ:
        missing, unexpected = model.transformer.load_state_dict(state, strict=False)
        allowed_missing = set(buffer_names(model))
        if set(missing) - allowed_missing:
            problems.append(f"missing from the file: {sorted(set(missing) - allowed_missing)}")
        if unexpected:
            problems.append(f"in the file, not in the model: {sorted(unexpected)}")
    if problems:
        print("typeflow's export does not load as GPT-2:\n  " + "\n  ".join(problems))
        return 1

    tokens = torch.tensor(document["tokens"], dtype=torch.long).reshape(document["batch"], document["steps"])
    targets = torch.tensor(document["targets"], dtype=torch.long).reshape(document["batch"], document["steps"])
    with torch.no_grad():
        logits = model(tokens)
        loss = loss_of(logits, targets).item()
    want = torch.from_numpy(expected["after_step.logits"][1].astype(np.float64))
    rtol, atol = document["relative_tolerance"], document["absolute_tolerance"]
    bad = ((logits - want).abs() > atol + rtol * want.abs()).sum().item()
    worst = ((logits - want).abs() / (atol + rtol * want.abs())).max().item()
    loss_ok = abs(loss - document["after_step_loss"]) <= atol + rtol * abs(document["after_step_loss"])
    print(f"typeflow's export loaded into GPT2LMHeadModel: {len(state)} tensors; logits after the step: "
          f"{bad} of {want.numel()} outside tolerance (worst at {worst:.3f} of it); loss {loss:.6f}, "
          f"expected {document['after_step_loss']:.6f}")
    return 0 if bad == 0 and loss_ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-export", metavar="PATH", help="check a safetensors file typeflow exported")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    if arguments.check_export:
        sys.exit(check_export(arguments.check_export))
    generate()


if __name__ == "__main__":
    main()
