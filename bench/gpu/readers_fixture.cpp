// Files that typeflow writes, for readers that Debian lacks and the GPU
// machine has (bench/gpu/readers.py runs them there):
//
//   readers_fixture DIR
//     DIR/logs/{train,validation}/events.out.tfevents.*   callbacks::tensorboard over 3 epochs of fit
//     DIR/history.json                                     fit's History: what the event files must hold
//     DIR/gpt2/model.safetensors, DIR/gpt2/config.json     a small GPT-2 exported as Hugging Face's
//     DIR/gpt2_logits.json                                 typeflow's logits of that model on fixed ids
//
// bench/gpu/bundle.sh runs it and packs DIR into the bundle.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <typeflow/io/hf_gpt2.hpp>
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void write_json(const fs::path& path, const json& value) {
  std::ofstream out(path);
  out << value.dump(1) << "\n";
  if (!out) throw std::runtime_error("readers_fixture: cannot write " + path.string());
}

// TensorBoard: a classifier of 8 features into 4 classes, with validation.
void tensorboard_log(const fs::path& dir) {
  using net = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  const tf::random_stream noise{5, 0};
  for (int i = 0; i < 64; ++i) {
    const int c = (i * 7) % 4;
    for (int j = 0; j < 8; ++j)
      features.push_back((j == c ? 1.f : 0.f) + 0.3f * (2.f * noise.uniform(static_cast<std::uint64_t>(i * 8 + j)) - 1.f));
    labels.push_back(c);
  }
  auto train = tf::data::from_tensor_slices<tf::shape<8>>(features, labels) | tf::data::batch<16>;
  auto validation = tf::data::from_tensor_slices<tf::shape<8>>(features, labels) | tf::data::batch<16>;
  tf::model<net> model{3};
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
  tf::callbacks::tensorboard board(dir / "logs", {.histogram_freq = 1});
  const auto history = model.fit(train, {.epochs = 3, .validation_data = validation, .callbacks = {&board}, .verbose = 0});
  json h;
  for (const char* name : {"loss", "accuracy", "val_loss", "val_accuracy"}) h[name] = history[name];
  write_json(dir / "history.json", h);
}

// GPT-2: 2 layers, 3 heads, width 24, 16 positions, 50 tokens; logits of 12 steps.
void gpt2_export(const fs::path& dir) {
  constexpr int layers = 2, heads = 3, width = 24, positions = 16, vocab = 50, steps = 12, batch = 2;
  using gpt2 = tf::io::hf_gpt2::network<layers, heads, width, positions, vocab, steps>;
  tf::model<gpt2> model{7};
  fs::create_directories(dir / "gpt2");
  model.save_weights(dir / "gpt2" / "model.safetensors", tf::io::hf_gpt2::save_options(model));
  write_json(dir / "gpt2" / "config.json",
             {{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"n_layer", layers}, {"n_head", heads},
              {"n_embd", width}, {"n_positions", positions}, {"n_ctx", positions}, {"vocab_size", vocab},
              {"layer_norm_epsilon", 1e-5}, {"activation_function", "gelu_new"}, {"tie_word_embeddings", true},
              {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0},
              {"bos_token_id", vocab - 1}, {"eos_token_id", vocab - 1}});  // GPT-2's 50256 is outside 50 tokens
  std::vector<std::int32_t> ids, targets;
  for (int i = 0; i < batch * steps; ++i) {
    ids.push_back((i * 17 + 3) % vocab);
    targets.push_back((i * 5 + 1) % vocab);
  }
  auto data = tf::data::from_tensor_slices<tf::shape<steps>, tf::shape<steps>>(ids, targets) | tf::data::batch<batch>;
  const auto logits = model.predict(data);  // (batch, steps, vocab)
  write_json(dir / "gpt2_logits.json", {{"batch", batch},
                                        {"steps", steps},
                                        {"vocab", vocab},
                                        {"ids", ids},
                                        {"logits", std::vector<float>(logits.begin(), logits.end())}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: readers_fixture DIR\n");
    return 2;
  }
  const fs::path dir = argv[1];
  fs::create_directories(dir);
  tensorboard_log(dir);
  gpt2_export(dir);
  std::printf("readers_fixture: wrote %s\n", dir.c_str());
  return 0;
}
