// Trains GPT-2 124M from scratch on Moby-Dick, on one GPU.
//
//   gpt2_moby_dick [epochs] [steps_per_epoch] [text] [--save FILE]
//
// GPT-2 small (io/hf_gpt2.hpp's block: 12 layers, 12 heads, width 768,
// vocabulary 50257, a context of 1024 tokens, tanh GELU, the head tied to
// the token embedding), its blocks recomputed in the backward pass, under
// mixed_bfloat16 on tf::cuda. The text (by default
// data/moby_dick/moby_dick.txt) is tokenized by GPT-2's byte-pair encoding
// (data/gpt2: scripts/setup.sh fetches both); the first 90% trains, the
// rest validates. Batches of 16 windows of 1024 tokens; AdamW as nanoGPT
// trains GPT-2 (learning rate 6e-4 after a warmup, cosine decay to a tenth,
// betas 0.9 / 0.95, weight decay 0.1, global clip norm 1).
//
// The model's memory plan is checked against 140 GiB (an H200 holds 141 GB)
// when this file compiles: device_budget. With --save, the weights are
// written in Hugging Face's layout, which transformers' GPT2LMHeadModel
// reads (io/hf_gpt2.hpp).
//
// Built wherever CMake finds CUDA (examples/CMakeLists.txt); it needs a GPU
// to run, and compiles with the host compiler like any program on tf::cuda.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/cuda.hpp>

namespace tf = typeflow;
using namespace tf::literals;

constexpr int layers = 12, heads = 12, width = 768, context = 1024, vocab = 50257;
constexpr int batch_size = 16;

namespace gpt2 = tf::io::hf_gpt2;
using network = tf::sequential<tf::typed_input<tf::int32, context>, tf::embedding<vocab, width>,
                               tf::positional_embedding<context>,
                               tf::repeat<layers, tf::recompute<gpt2::block<heads, width>>>, gpt2::layer_norm,
                               tf::tied_logits>;
using model_type = tf::model<network, tf::mixed_bfloat16, tf::single_device, tf::cuda, tf::device_budget<140_GiB>>;

int main(int argc, char** argv) try {
  std::vector<std::string> arguments;
  std::string save_path;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--save") {
      if (i + 1 == argc) throw std::invalid_argument("--save needs a file name");
      save_path = argv[++i];
    } else {
      arguments.emplace_back(argv[i]);
    }
  }
  const int epochs = arguments.size() > 0 ? std::atoi(arguments[0].c_str()) : 4;
  const int steps_per_epoch = arguments.size() > 1 ? std::atoi(arguments[1].c_str()) : 200;
  const std::string path = arguments.size() > 2 ? arguments[2] : "data/moby_dick/moby_dick.txt";
  if (epochs < 1 || steps_per_epoch < 1) throw std::invalid_argument("epochs and steps_per_epoch must be positive");

  const auto tokenizer = tf::text::gpt2_tokenizer::load("data/gpt2");
  const auto bytes = tf::data::read_file_bytes(path);  // names the file when it cannot
  std::vector<std::int32_t> ids = tokenizer.encode(std::string(bytes.begin(), bytes.end()));
  const std::size_t split = ids.size() * 9 / 10;
  std::vector<std::int32_t> train_ids(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split));
  std::vector<std::int32_t> val_ids(ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end());
  std::printf("%s: %zu GPT-2 tokens; %zu train, %zu validation\n", path.c_str(), ids.size(), train_ids.size(),
              val_ids.size());

  auto train = tf::data::lm_windows<context>(std::move(train_ids), 1)
             | tf::data::shuffle(1 << 20, /*seed=*/1337)
             | tf::data::take(static_cast<std::int64_t>(steps_per_epoch) * batch_size)
             | tf::data::batch<batch_size>
             | tf::data::prefetch(2);
  auto validation = tf::data::lm_windows<context>(std::move(val_ids)) | tf::data::batch<batch_size>;

  const std::int64_t steps = static_cast<std::int64_t>(epochs) * steps_per_epoch;
  const std::int64_t warmup = std::min<std::int64_t>(200, steps / 10);
  model_type model{/*seed=*/1337};
  model.summary();
  model.compile(tf::optimizers::adamw{.learning_rate = tf::schedules::cosine_decay{6e-4, steps - warmup,
                                                                                  {.alpha = 0.1, .warmup_steps = warmup}},
                                      .weight_decay = 0.1f,
                                      .beta_2 = 0.95f,
                                      .global_clipnorm = 1.f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});

  const auto start = std::chrono::steady_clock::now();
  const auto history = model.fit(train, {.epochs = epochs, .validation_data = validation});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("validation loss by epoch (nats per token):");
  for (double loss : history["val_loss"]) std::printf(" %.4f", loss);
  std::printf("\ntrained %lld steps (%lld tokens) in %.1f s, validation included\n", static_cast<long long>(steps),
              static_cast<long long>(steps) * batch_size * context, seconds);
  if (!save_path.empty()) {
    model.save_weights(save_path, gpt2::save_options(model.parameter_specs()));
    std::printf("weights in Hugging Face's GPT-2 layout: %s\n", save_path.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt2_moby_dick: %s\n", e.what());
  return 1;
}
