// tf::io::hf_gpt2: Hugging Face's GPT-2 layout <-> a typeflow GPT-2, both ways.
//
//   using gpt2_small = tf::io::hf_gpt2::network</*layers=*/12, /*heads=*/12, /*width=*/768,
//                                               /*positions=*/1024, /*vocab=*/50257, /*steps=*/128>;
//   tf::model<gpt2_small> model;
//   model.load_weights("gpt2/model.safetensors", tf::io::hf_gpt2::load_options(model));
//   ... fine-tune ...
//   model.save_weights("out/model.safetensors", tf::io::hf_gpt2::save_options(model));  // transformers reads it
//
// The network. GPT-2 (transformers' GPT2LMHeadModel) is a pre-norm decoder:
// token and position embeddings, N blocks of
//   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x));  mlp = c_proj(gelu_tanh(c_fc(.)))  (width 4D)
// then ln_f and logits tied to the token embedding (no bias); LayerNorm
// epsilon 1e-5; attention scaled by 1 / sqrt(head width) with a causal mask.
// hf_gpt2::network is that, in typeflow's layers, without dropout (add
// tf::dropout where fine-tuning wants it: no layer with parameters moves).
//
// The table. Hugging Face's names (what the file holds, maybe under a
// "transformer." prefix) and typeflow's (what parameter_specs() lists for
// hf_gpt2::network), in block i and at the top; both sides store every tensor in the same layout,
// so loading and saving copy values without transposing, splitting or
// permuting anything:
//
//   Hugging Face           typeflow                        shape      why the layout is the same
//   wte.weight             layers.1.embeddings             (V, D)     a row per token on both sides
//   wpe.weight             layers.2.embeddings             (P, D)     positional_embedding<P>: P = n_positions
//   h.<i>.ln_1.weight      blocks.<i>.layer_norm.gamma     (D,)
//   h.<i>.ln_1.bias        blocks.<i>.layer_norm.beta      (D,)
//   h.<i>.attn.c_attn.weight  blocks.<i>.attn.qkv.kernel   (D, 3D)    Conv1D stores (in, out), as a typeflow
//   h.<i>.attn.c_attn.bias    blocks.<i>.attn.qkv.bias     (3D,)      kernel; columns [q | k | v], head h at
//                                                                     h*D/H .. (h+1)*D/H - 1 of each third,
//                                                                     on both sides (split(D), then view(H, D/H))
//   h.<i>.attn.c_proj.weight  blocks.<i>.attn.proj.kernel  (D, D)     Conv1D (in, out)
//   h.<i>.attn.c_proj.bias    blocks.<i>.attn.proj.bias    (D,)
//   h.<i>.ln_2.weight      blocks.<i>.layer_norm_1.gamma   (D,)
//   h.<i>.ln_2.bias        blocks.<i>.layer_norm_1.beta    (D,)
//   h.<i>.mlp.c_fc.weight  blocks.<i>.dense.kernel         (D, 4D)    Conv1D (in, out)
//   h.<i>.mlp.c_fc.bias    blocks.<i>.dense.bias           (4D,)
//   h.<i>.mlp.c_proj.weight  blocks.<i>.dense_1.kernel     (4D, D)    Conv1D (in, out)
//   h.<i>.mlp.c_proj.bias  blocks.<i>.dense_1.bias         (D,)
//   ln_f.weight            layers.4.gamma                  (D,)
//   ln_f.bias              layers.4.beta                   (D,)
//   lm_head.weight         (none: tied_logits reads wte)   (V, D)     GPT-2 ties it to wte; not read
//   h.<i>.attn.bias, h.<i>.attn.masked_bias                           the causal mask's buffers, not
//                                                                     parameters; not read, not written
//
// The typeflow names are found in the model by their ends, not fixed: wte
// is the first embedding table outside the blocks, wpe the second, ln_f the
// last layer norm outside them, and block i the i-th "...blocks.<j>." in the
// model's order, so a network with dropout after the embeddings, blocks
// split between a nested (or frozen) part and the top level, or another
// head (with load_options(model).allow_missing = true) maps too. Saving
// writes the names without a prefix (as the published gpt2 checkpoint does)
// and metadata {"format": "pt"}, which transformers requires; a model
// tensor outside the table is an error there, since GPT-2 has no place for it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "typeflow/core/dtype.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/io/weights_options.hpp"
#include "typeflow/layers/activations.hpp"
#include "typeflow/layers/attention.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/layers/embedding.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/layer_norm.hpp"
#include "typeflow/model/repeat.hpp"
#include "typeflow/model/residual.hpp"
#include "typeflow/model/sequential.hpp"

namespace typeflow::io::hf_gpt2 {

// ---------------------------------------------------------------------------
// The network
// ---------------------------------------------------------------------------

using layer_norm = layer_normalization<layer_norm_options{.epsilon = 1e-5f}>;  // GPT-2's layer_norm_epsilon

// One GPT-2 block of width Width: GPT2Block's ln_1, attn, ln_2, mlp.
template <int Heads, int Width>
using block = sequential<residual<layer_norm, causal_self_attention<Heads>>,
                         residual<layer_norm, dense<4 * Width>, gelu_tanh, dense<Width>>>;

// GPT2LMHeadModel of n_layer = Layers, n_head = Heads, n_embd = Width,
// n_positions = Positions, vocab_size = Vocab, reading Steps <= Positions
// token ids at a time.
template <int Layers, int Heads, int Width, int Positions, int Vocab, int Steps = Positions>
using network = sequential<typed_input<int32, Steps>, embedding<Vocab, Width>, positional_embedding<Positions>,
                           repeat<Layers, block<Heads, Width>>, layer_norm, tied_logits>;

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

struct name_pair {
  std::string_view hugging_face;
  std::string_view typeflow;
};

// Block i's tensors: "h.<i>." + hugging_face is "blocks.<i>." + typeflow.
inline constexpr std::array<name_pair, 12> block_names{{
    {"ln_1.weight", "layer_norm.gamma"},
    {"ln_1.bias", "layer_norm.beta"},
    {"attn.c_attn.weight", "attn.qkv.kernel"},
    {"attn.c_attn.bias", "attn.qkv.bias"},
    {"attn.c_proj.weight", "attn.proj.kernel"},
    {"attn.c_proj.bias", "attn.proj.bias"},
    {"ln_2.weight", "layer_norm_1.gamma"},
    {"ln_2.bias", "layer_norm_1.beta"},
    {"mlp.c_fc.weight", "dense.kernel"},
    {"mlp.c_fc.bias", "dense.bias"},
    {"mlp.c_proj.weight", "dense_1.kernel"},
    {"mlp.c_proj.bias", "dense_1.bias"},
}};

// A block's buffers, which the file may hold and which are not parameters.
inline constexpr std::array<std::string_view, 2> block_buffers{"attn.bias", "attn.masked_bias"};

// What GPT2LMHeadModel's state dict puts before the base model's names.
inline constexpr std::string_view prefix = "transformer.";

// Every (Hugging Face name, typeflow name) of a model with these parameter
// specs, in the model's order. The model's names are recognised by their
// ends, so combinators around them do not matter: a block's tensor is
// "...blocks.<j>." + a typeflow name of block_names, and GPT-2's block i is
// the i-th such block prefix in the model's order ("blocks.0." at the top,
// or "layers.1.blocks.0." inside a nested block or frozen<>); outside the
// blocks, wte and wpe are the first and second "...embeddings", ln_f the
// last "...gamma" and its "...beta". Throws std::invalid_argument when the
// model lacks GPT-2's two embedding tables or the final layer norm.
inline std::vector<std::pair<std::string, std::string>> table(std::span<const tensor_spec> model) {
  // The "...blocks.<j>." prefix of a block tensor's name and its typeflow
  // name within the block, or an empty prefix.
  const auto split_block = [](std::string_view name) -> std::pair<std::string_view, const name_pair*> {
    for (std::size_t at = name.find("blocks."); at != std::string_view::npos; at = name.find("blocks.", at + 1)) {
      if (at > 0 && name[at - 1] != '.') continue;
      std::size_t digits = at + 7;
      while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
      if (digits == at + 7 || digits >= name.size() || name[digits] != '.') continue;
      const std::string_view rest = name.substr(digits + 1);
      for (const name_pair& pair : block_names)
        if (pair.typeflow == rest) return {name.substr(0, digits + 1), &pair};
    }
    return {{}, nullptr};
  };
  const auto ends_with_segment = [](std::string_view name, std::string_view last) {
    return name == last || (name.ends_with(last) && name[name.size() - last.size() - 1] == '.');
  };

  std::vector<std::string> embeddings;  // outside the blocks, in order
  std::string final_norm;               // the prefix of the last gamma outside the blocks
  std::vector<std::string_view> block_prefixes;
  std::map<std::string, std::string, std::less<>> from_typeflow;  // typeflow -> hf
  for (const tensor_spec& spec : model) {
    const std::string_view name = spec.name;
    if (const auto [prefix, pair] = split_block(name); pair != nullptr) {
      auto at = std::find(block_prefixes.begin(), block_prefixes.end(), prefix);
      if (at == block_prefixes.end()) at = block_prefixes.insert(at, prefix);
      from_typeflow[spec.name] =
          "h." + std::to_string(at - block_prefixes.begin()) + "." + std::string(pair->hugging_face);
      continue;
    }
    if (ends_with_segment(name, "embeddings")) embeddings.push_back(spec.name);
    if (ends_with_segment(name, "gamma")) final_norm = spec.name.substr(0, name.size() - 5);
  }
  const auto refuse = [](const std::string& what) {
    return std::invalid_argument(
        "hf_gpt2: the model " + what +
        "; GPT-2's layout is typed_input, embedding, positional_embedding, repeat<N, block>, layer_norm, "
        "tied_logits (hf_gpt2::network)");
  };
  if (embeddings.size() < 2)
    throw refuse("has " + std::to_string(embeddings.size()) +
                 " embedding tables outside its blocks, not GPT-2's two (wte, then wpe)");
  if (final_norm.empty()) throw refuse("has no layer_norm after its blocks for ln_f");
  from_typeflow[embeddings[0]] = "wte.weight";
  from_typeflow[embeddings[1]] = "wpe.weight";
  from_typeflow[final_norm + "gamma"] = "ln_f.weight";
  from_typeflow[final_norm + "beta"] = "ln_f.bias";

  std::vector<std::pair<std::string, std::string>> entries;
  for (const tensor_spec& spec : model)
    if (const auto it = from_typeflow.find(spec.name); it != from_typeflow.end()) entries.emplace_back(it->second, spec.name);
  return entries;
}

// Whether a Hugging Face name (without the prefix) is a block's buffer,
// "h.<i>.attn.bias" or "h.<i>.attn.masked_bias".
inline bool is_buffer(std::string_view name) {
  if (!name.starts_with("h.")) return false;
  const std::size_t dot = name.find('.', 2);
  if (dot == std::string_view::npos || dot == 2) return false;
  for (char c : name.substr(2, dot - 2))
    if (c < '0' || c > '9') return false;
  const std::string_view rest = name.substr(dot + 1);
  for (std::string_view buffer : block_buffers)
    if (rest == buffer) return true;
  return false;
}

// ---------------------------------------------------------------------------
// Options for load_weights and save_weights
// ---------------------------------------------------------------------------

// load_weights options that read Hugging Face's names into a model with
// these parameter specs: "transformer." dropped, the table applied, the
// buffers and lm_head.weight left out. A name outside the table stays as it
// is, so it is reported as not in the model (e.g. h.12.* into 12 blocks).
// Set allow_missing, allow_unexpected or skip_mismatch on the result as needed.
inline load_weights_options load_options(std::span<const tensor_spec> model) {
  std::map<std::string, std::string, std::less<>> to_typeflow;
  for (auto& [hf, typeflow_name] : table(model)) to_typeflow.emplace(std::move(hf), std::move(typeflow_name));
  load_weights_options options;
  options.rename = [to_typeflow = std::move(to_typeflow)](std::string_view name) -> std::string {
    if (name.starts_with(prefix)) name.remove_prefix(prefix.size());
    if (name == "lm_head.weight" || is_buffer(name)) return "";
    const auto it = to_typeflow.find(name);
    return it == to_typeflow.end() ? std::string(name) : it->second;
  };
  return options;
}

// save_weights options that write a model with these parameter specs under
// Hugging Face's names, metadata {"format": "pt"}. Saving throws
// std::invalid_argument naming a model tensor outside the table.
inline save_weights_options save_options(std::span<const tensor_spec> model) {
  std::map<std::string, std::string, std::less<>> to_hugging_face;
  for (auto& [hf, typeflow_name] : table(model)) to_hugging_face.emplace(std::move(typeflow_name), std::move(hf));
  save_weights_options options;
  options.rename = [to_hugging_face = std::move(to_hugging_face)](std::string_view name) -> std::string {
    const auto it = to_hugging_face.find(name);
    if (it == to_hugging_face.end())
      throw std::invalid_argument("hf_gpt2: the model's tensor \"" + std::string(name) +
                                  "\" has no place in Hugging Face's GPT-2 layout (see the table in io/hf_gpt2.hpp)");
    return it->second;
  };
  options.metadata = {{"format", "pt"}};
  return options;
}

// The same, from a model: hf_gpt2::load_options(model).
template <class Model>
  requires requires(const Model& m) { m.parameter_specs(); }
load_weights_options load_options(const Model& model) {
  const std::vector<tensor_spec> specs = model.parameter_specs();
  return load_options(std::span<const tensor_spec>(specs));
}
template <class Model>
  requires requires(const Model& m) { m.parameter_specs(); }
save_weights_options save_options(const Model& model) {
  const std::vector<tensor_spec> specs = model.parameter_specs();
  return save_options(std::span<const tensor_spec>(specs));
}

}  // namespace typeflow::io::hf_gpt2
