// Hugging Face's GPT-2 layout, both ways, against PyTorch
// (tests/reference/hf_gpt2_reference.py wrote the fixtures):
// hf_gpt2_model.safetensors, as transformers saves a GPT2LMHeadModel, loads
// into tf::io::hf_gpt2::network of the same size; its logits, loss and every
// parameter's gradient match PyTorch's; after one SGD step typeflow's export
// holds Hugging Face's names, shapes and PyTorch's stepped weights, and
// loaded again gives PyTorch's logits after the step. Where /usr/bin/python3
// has torch, the script itself also loads the export as transformers would.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <typeflow/io/hf_gpt2.hpp>
#include <typeflow/typeflow.hpp>

#include "../support/reference_json.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace hf_gpt2 = typeflow::io::hf_gpt2;
using json = nlohmann::json;

namespace {

constexpr int n_layer = 2, n_head = 3, n_embd = 24, n_positions = 16, vocab = 50, steps = 12, batch = 2;
using gpt2 = hf_gpt2::network<n_layer, n_head, n_embd, n_positions, vocab, steps>;

std::filesystem::path reference_path(const std::string& name) {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "reference" / name;
}

const json& document() {
  static const json doc = typeflow::testing::read_reference("hf_gpt2.json");
  return doc;
}

const tf::io::safetensors_file& expected() {
  static const auto file = tf::io::safetensors_file::read(reference_path("hf_gpt2_expected.safetensors"));
  return file;
}

// Counts the values outside atol + rtol * |wanted| and remembers the worst ratio.
struct comparison {
  int outside = 0;
  double worst = 0;  // the largest |actual - wanted| / (atol + rtol |wanted|)
  template <class Actual>
  comparison(const Actual& actual, const std::vector<float>& wanted) {
    const double rtol = document().at("relative_tolerance"), atol = document().at("absolute_tolerance");
    REQUIRE(actual.size() == wanted.size());
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      const double ratio = std::fabs(double(actual[i]) - wanted[i]) / (atol + rtol * std::fabs(wanted[i]));
      outside += ratio > 1;
      worst = std::max(worst, ratio);
    }
  }
};

auto token_batches() {
  const json& doc = document();
  std::vector<std::int32_t> tokens = doc.at("tokens"), targets = doc.at("targets");
  return tf::data::from_tensor_slices<tf::shape<steps>, tf::shape<steps>>(tokens, targets) | tf::data::batch<batch>;
}

tf::data::batch_of<batch, tf::data::tensor_value<std::int32_t, tf::shape<steps>>,
                   tf::data::tensor_value<std::int32_t, tf::shape<steps>>>
one_batch() {
  const json& doc = document();
  tf::data::batch_of<batch, tf::data::tensor_value<std::int32_t, tf::shape<steps>>,
                     tf::data::tensor_value<std::int32_t, tf::shape<steps>>>
      b;
  for (int i = 0; i < batch * steps; ++i) {
    b.features[i] = doc.at("tokens")[i].get<std::int32_t>();
    b.labels[i] = doc.at("targets")[i].get<std::int32_t>();
  }
  b.valid = batch;
  return b;
}

bool python_with_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("hf_gpt2's table pairs every parameter of hf_gpt2::network with one of Hugging Face's names") {
  tf::model<gpt2> model{1};
  const auto specs = model.parameter_specs();
  const auto table = hf_gpt2::table(specs);
  REQUIRE(table.size() == specs.size());  // nothing of the model left out: the head is tied
  std::vector<std::string> hf_names;
  for (std::size_t i = 0; i < table.size(); ++i) {
    CHECK(table[i].second == specs[i].name);  // in the model's order
    hf_names.push_back(table[i].first);
  }
  const std::vector<std::string> torch_names = document().at("parameters");
  CHECK(std::set<std::string>(hf_names.begin(), hf_names.end()) ==
        std::set<std::string>(torch_names.begin(), torch_names.end()));
  CHECK(table.front() == std::pair<std::string, std::string>{"wte.weight", "layers.1.embeddings"});
  CHECK(std::count(hf_names.begin(), hf_names.end(), "h.1.attn.c_attn.weight") == 1);
}

TEST_CASE("a GPT-2 in Hugging Face's layout loads into hf_gpt2::network and matches PyTorch's logits, loss and "
          "gradients") {
  const json& doc = document();
  const auto file = tf::io::safetensors_file::read(reference_path("hf_gpt2_model.safetensors"));
  tf::model<gpt2> model{1};
  const tf::io::load_weights_report report =
      model.load_weights(reference_path("hf_gpt2_model.safetensors"), hf_gpt2::load_options(model));
  CHECK(report.loaded.size() == model.parameter_specs().size());
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  CHECK(report.left_out.size() == 2 * n_layer);  // attn.bias and attn.masked_bias per block: buffers

  // Every value as the file holds it, under the table's name.
  for (const auto& [hf_name, typeflow_name] : hf_gpt2::table(model.parameter_specs())) {
    INFO(hf_name << " -> " << typeflow_name);
    const std::vector<float> stored = tf::io::read_float32(file, "transformer." + hf_name);
    const auto view = model.parameter(typeflow_name);
    REQUIRE(view.size() == stored.size());
    CHECK(std::equal(view.begin(), view.end(), stored.begin()));
  }

  const comparison logits(model.predict(token_batches()), tf::io::read_float32(expected(), "logits"));
  INFO("logits: worst at " << logits.worst << " of the tolerance");
  CHECK(logits.outside == 0);

  model.compile(tf::optimizers::sgd{.learning_rate = doc.at("learning_rate").get<float>()},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const double loss = model.train_on_batch(one_batch());
  const double want_loss = doc.at("loss");
  CHECK(std::fabs(loss - want_loss) <= 1e-5 + 1e-4 * want_loss);

  int checked = 0;
  double worst = 0;
  for (const auto& [hf_name, typeflow_name] : hf_gpt2::table(model.parameter_specs())) {
    const comparison gradient(model.gradient(typeflow_name), tf::io::read_float32(expected(), "grad." + hf_name));
    INFO(hf_name << " (" << typeflow_name << "): worst at " << gradient.worst << " of the tolerance");
    CHECK(gradient.outside == 0);
    worst = std::max(worst, gradient.worst);
    ++checked;
  }
  CHECK(checked == static_cast<int>(doc.at("parameters").size()));
  MESSAGE("logits at most " << logits.worst << ", gradients at most " << worst
                            << " of the tolerance (1e-5 + 1e-4 |x|)");
}

TEST_CASE("typeflow writes GPT-2 after a training step in Hugging Face's layout, and PyTorch's weights and logits "
          "come back") {
  const json& doc = document();
  const float rate = doc.at("learning_rate");
  const auto original = tf::io::safetensors_file::read(reference_path("hf_gpt2_model.safetensors"));
  tf::model<gpt2> model{1};
  model.load_weights(reference_path("hf_gpt2_model.safetensors"), hf_gpt2::load_options(model));
  model.compile(tf::optimizers::sgd{.learning_rate = rate},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  model.train_on_batch(one_batch());

  typeflow::testing::temp_dir dir("typeflow_hf_gpt2");
  const auto exported_path = dir.path / "model.safetensors";
  model.save_weights(exported_path, hf_gpt2::save_options(model));
  const auto exported = tf::io::safetensors_file::read(exported_path);
  CHECK(exported.metadata() == std::map<std::string, std::string>{{"format", "pt"}});

  // Hugging Face's names without the prefix, the shapes PyTorch wrote, F32,
  // and PyTorch's weights after the step: w - rate * grad.
  const std::vector<std::string> names = doc.at("parameters");
  REQUIRE(exported.tensors().size() == names.size());
  for (const std::string& name : names) {
    INFO(name);
    const tf::io::tensor_spec* written = exported.find(name);
    REQUIRE(written != nullptr);
    CHECK(written->dtype == "F32");
    CHECK(written->shape == original.find("transformer." + name)->shape);
    std::vector<float> stepped = tf::io::read_float32(original, "transformer." + name);
    const std::vector<float> gradient = tf::io::read_float32(expected(), "grad." + name);
    for (std::size_t i = 0; i < stepped.size(); ++i) stepped[i] -= rate * gradient[i];
    const comparison weights(tf::io::read_float32(exported, name), stepped);
    CHECK(weights.outside == 0);
  }

  // Read back by typeflow: PyTorch's logits after its own step.
  tf::model<gpt2> reloaded{2};
  reloaded.load_weights(exported_path, hf_gpt2::load_options(reloaded));
  const comparison logits(reloaded.predict(token_batches()), tf::io::read_float32(expected(), "after_step.logits"));
  INFO("logits after the step: worst at " << logits.worst << " of the tolerance");
  CHECK(logits.outside == 0);

  // Read back by PyTorch, as transformers loads a checkpoint, where it is installed.
  if (python_with_torch()) {
    const std::string command = "/usr/bin/python3 " + reference_path("hf_gpt2_reference.py").string() +
                                " --check-export " + exported_path.string();
    CHECK_MESSAGE(std::system(command.c_str()) == 0, command);
  } else {
    MESSAGE("/usr/bin/python3 has no torch (scripts/setup.sh's setup_torch installs it): the export was checked "
            "against the fixture's values only");
  }
}

TEST_CASE("hf_gpt2 reads the published layout too: no prefix, lm_head.weight present, float16 weights") {
  const auto original = tf::io::safetensors_file::read(reference_path("hf_gpt2_model.safetensors"));
  // The fixture rewritten: names without "transformer.", the tied head
  // stored, every parameter in F16 (the buffers dropped).
  std::vector<std::vector<std::uint16_t>> halves;
  std::vector<tf::io::tensor_to_write> tensors;
  halves.reserve(original.tensors().size() + 1);
  const auto add = [&](const std::string& name, const tf::io::tensor_spec& spec) {
    const std::vector<float> values = tf::io::read_float32(original, spec.name);
    auto& bits = halves.emplace_back();
    for (float v : values) bits.push_back(tf::f16(v).bits());
    tensors.push_back({name, "F16", spec.shape, bits.data(), bits.size() * 2});
  };
  for (const auto& spec : original.tensors())
    if (spec.dtype == "F32" && spec.shape.size() > 0) add(spec.name.substr(12), spec);  // without "transformer."
  add("lm_head.weight", *original.find("transformer.wte.weight"));
  typeflow::testing::temp_dir dir("typeflow_hf_gpt2");
  tf::io::write_safetensors(dir.path / "gpt2_f16.safetensors", tensors, {{"format", "pt"}});

  tf::model<gpt2> model{1};
  const auto report = model.load_weights(dir.path / "gpt2_f16.safetensors", hf_gpt2::load_options(model));
  CHECK(report.left_out == std::vector<std::string>{"lm_head.weight"});
  const auto view = model.parameter("blocks.1.attn.qkv.kernel");
  const std::vector<float> full = tf::io::read_float32(original, "transformer.h.1.attn.c_attn.weight");
  for (std::size_t i = 0; i < full.size(); ++i) REQUIRE(view[i] == static_cast<float>(tf::f16(full[i])));
}

TEST_CASE("hf_gpt2 loads the body into a GPT-2 with another head, and refuses to save a head GPT-2 has no place for") {
  constexpr int classes = 7;
  using classifier = tf::sequential<tf::typed_input<tf::int32, steps>, tf::embedding<vocab, n_embd>,
                                    tf::positional_embedding<n_positions>,
                                    tf::repeat<n_layer, hf_gpt2::block<n_head, n_embd>>, hf_gpt2::layer_norm,
                                    tf::dense<classes>>;
  tf::model<classifier> model{3};
  const std::vector<float> head_before(model.parameter("layers.5.kernel").begin(),
                                       model.parameter("layers.5.kernel").end());
  const auto path = reference_path("hf_gpt2_model.safetensors");

  const std::string refused = typeflow::testing::message_of<std::runtime_error>(
      [&] { model.load_weights(path, hf_gpt2::load_options(model)); });
  CHECK(refused.find("in the model, not in the file (2): layers.5.kernel, layers.5.bias") != std::string::npos);
  CHECK(refused.find("[allow_missing keeps their values]") != std::string::npos);

  auto options = hf_gpt2::load_options(model);
  options.allow_missing = true;
  const auto report = model.load_weights(path, options);
  CHECK(report.missing == std::vector<std::string>{"layers.5.kernel", "layers.5.bias"});
  CHECK(report.loaded.size() == model.parameter_specs().size() - 2);
  const auto head = model.parameter("layers.5.kernel");
  CHECK(std::equal(head.begin(), head.end(), head_before.begin()));
  const auto ln_f = model.parameter("layers.4.gamma");
  const std::vector<float> want = tf::io::read_float32(tf::io::safetensors_file::read(path), "transformer.ln_f.weight");
  CHECK(std::equal(ln_f.begin(), ln_f.end(), want.begin()));

  typeflow::testing::temp_dir dir("typeflow_hf_gpt2");
  const std::string unsaveable = typeflow::testing::message_of<std::invalid_argument>(
      [&] { model.save_weights(dir.path / "x.safetensors", hf_gpt2::save_options(model)); });
  CHECK(unsaveable.find("\"layers.5.kernel\" has no place in Hugging Face's GPT-2 layout") != std::string::npos);
  CHECK(dir.files().empty());
}

TEST_CASE("hf_gpt2 numbers GPT-2's blocks in the model's order when some sit in a nested block, as under frozen") {
  using split = tf::sequential<tf::typed_input<tf::int32, steps>, tf::embedding<vocab, n_embd>,
                               tf::positional_embedding<n_positions>,
                               tf::sequential<tf::repeat<1, hf_gpt2::block<n_head, n_embd>>>,  // "layers.3.blocks.0."
                               tf::repeat<1, hf_gpt2::block<n_head, n_embd>>,                  // "blocks.0."
                               hf_gpt2::layer_norm, tf::tied_logits>;
  tf::model<split> model{5};
  const auto table = hf_gpt2::table(model.parameter_specs());
  REQUIRE(table.size() == model.parameter_specs().size());
  const auto hf_name_of = [&](const std::string& typeflow_name) {
    for (const auto& [hf, name] : table)
      if (name == typeflow_name) return hf;
    return std::string("(none)");
  };
  CHECK(hf_name_of("layers.3.blocks.0.attn.qkv.kernel") == "h.0.attn.c_attn.weight");
  CHECK(hf_name_of("blocks.0.attn.qkv.kernel") == "h.1.attn.c_attn.weight");
  CHECK(hf_name_of("blocks.0.dense_1.bias") == "h.1.mlp.c_proj.bias");
  CHECK(hf_name_of("layers.5.gamma") == "ln_f.weight");

  // The same GPT-2, so PyTorch's logits.
  model.load_weights(reference_path("hf_gpt2_model.safetensors"), hf_gpt2::load_options(model));
  const comparison logits(model.predict(token_batches()), tf::io::read_float32(expected(), "logits"));
  CHECK(logits.outside == 0);
}

TEST_CASE("hf_gpt2 loads the first blocks of a deeper GPT-2 only when asked to leave the rest unread") {
  using shallow = hf_gpt2::network<1, n_head, n_embd, n_positions, vocab, steps>;
  tf::model<shallow> model{4};
  const auto path = reference_path("hf_gpt2_model.safetensors");
  const std::string refused = typeflow::testing::message_of<std::runtime_error>(
      [&] { model.load_weights(path, hf_gpt2::load_options(model)); });
  CHECK(refused.find("in the file, not in the model (12): \"transformer.h.1.ln_1.weight\" (renamed to h.1.ln_1.weight)") !=
        std::string::npos);
  CHECK(refused.find("[allow_unexpected leaves them unread]") != std::string::npos);

  auto options = hf_gpt2::load_options(model);
  options.allow_unexpected = true;
  const auto report = model.load_weights(path, options);
  CHECK(report.unexpected.size() == 12);
  CHECK(report.loaded.size() == model.parameter_specs().size());
}

TEST_CASE("hf_gpt2 refuses a model without GPT-2's embeddings and final norm, naming the layout") {
  using mlp = tf::sequential<tf::input<4>, tf::dense<3>>;
  tf::model<mlp> model{1};
  const std::string message =
      typeflow::testing::message_of<std::invalid_argument>([&] { hf_gpt2::load_options(model); });
  CHECK(message.find("has 0 embedding tables outside its blocks, not GPT-2's two (wte, then wpe)") != std::string::npos);
  CHECK(message.find("hf_gpt2::network") != std::string::npos);
}
