// TensorBoard's event files: CRC-32C by the instruction and by the table,
// the record framing and protobuf messages read back by a reader of the
// tests' own (tests/support/event_file_reader.hpp), a fixture written by an
// independent writer (Google's protobuf library, tests/reference/
// tensorboard_events.py) read by that reader, typeflow's files parsed by the
// protobuf library where Debian's python3-protobuf is present, and
// callbacks::tensorboard in fit laying out Keras's directories and tags.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <typeflow/callbacks/tensorboard.hpp>
#include <typeflow/io/crc32c.hpp>
#include <typeflow/io/event_file.hpp>
#include <typeflow/typeflow.hpp>

#include "../support/event_file_reader.hpp"
#include "../support/command_output.hpp"
#include "../support/test_support.hpp"
#include "../support/toy_classifier.hpp"

namespace tf = typeflow;
namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;

namespace {

fs::path reference_path(const std::string& name) { return fs::path(__FILE__).parent_path().parent_path() / "reference" / name; }

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

// A Python with Google's protobuf library, or empty.
std::string python_with_protobuf() {
  for (const char* python : {"/usr/bin/python3", "python3"}) {
    const std::string command = std::string(python) + " -c 'import google.protobuf' >/dev/null 2>&1";
    if (std::system(command.c_str()) == 0) return python;
  }
  return {};
}

// The scalars of a file, by tag: (step, value) in file order.
std::map<std::string, std::vector<std::pair<std::int64_t, float>>> scalars_of(const fs::path& file) {
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> out;
  for (const auto& event : tf_testing::read_event_file(file))
    for (const auto& value : event.values)
      if (value.simple_value) out[value.tag].emplace_back(event.step, *value.simple_value);
  return out;
}

using tf_testing::toy_data;
using tf_testing::toy_net;

}  // namespace

TEST_CASE("crc32c gives the standard check value and the same values by instruction and by table") {
  CHECK(tf::io::crc32c(std::string_view("123456789")) == 0xE3069283u);
  CHECK(tf::io::crc32c(std::string_view("")) == 0u);
  // RFC 3720's test vector: 32 bytes of zeros.
  CHECK(tf::io::crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  MESSAGE("crc32c runs on: " << tf::io::crc32c_implementation());
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>((i * 131 + 7) % 251));
  for (std::size_t offset : {0u, 1u, 3u, 7u})
    for (std::size_t length : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 500u, 993u}) {
      const auto part = bytes_of(data).subspan(offset, length);
      CHECK(tf::io::crc32c(part) == tf::io::crc32c_table(part));
    }
  // Continuing a CRC over a second part gives the CRC of the whole.
  const auto all = bytes_of(data);
  CHECK(tf::io::crc32c(all.subspan(300), tf::io::crc32c(all.first(300))) == tf::io::crc32c(all));
  for (std::uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) CHECK(tf::io::unmask_crc32c(tf::io::mask_crc32c(crc)) == crc);
  CHECK(tf::io::mask_crc32c(0xE3069283u) != 0xE3069283u);
}

TEST_CASE("event_file_writer writes framed Events that the tests' reader parses back") {
  tf_testing::temp_dir dir("typeflow_tensorboard_test_writer");
  fs::path file;
  const std::vector<float> weights{-2.f, -1.f, 0.f, 0.5f, 1.f, 4.f, NAN};
  {
    tf::io::event_file_writer writer(dir.path / "run" / "train");  // parents created
    file = writer.path();
    writer.add_scalar("epoch_loss", 0.75, 0);
    writer.add_scalar("epoch_loss", 0.5, 1);
    writer.add_scalar("batch_loss", -3.25, -7);
    writer.add_histogram("layers.1.kernel", tf::io::histogram::of(weights, 3), 9);
    writer.flush();
  }
  CHECK(file.parent_path() == dir.path / "run" / "train");
  CHECK(file.filename().string().starts_with("events.out.tfevents."));
  CHECK(file.filename().string().ends_with(".v2"));
  const auto events = tf_testing::read_event_file(file);
  REQUIRE(events.size() == 5);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].values.empty());
  const double now = tf::io::event_file_writer::wall_time();
  for (const auto& e : events) CHECK(std::fabs(e.wall_time - now) < 600);
  CHECK(events[1].step == 0);
  REQUIRE(events[1].values.size() == 1);
  CHECK(events[1].values[0].tag == "epoch_loss");
  CHECK(*events[1].values[0].simple_value == 0.75f);
  CHECK(events[2].step == 1);
  CHECK(*events[2].values[0].simple_value == 0.5f);
  CHECK(events[3].step == -7);
  CHECK(*events[3].values[0].simple_value == -3.25f);
  CHECK(events[4].step == 9);
  REQUIRE(events[4].values.size() == 1);
  CHECK(events[4].values[0].tag == "layers.1.kernel");
  REQUIRE(events[4].values[0].histo);
  const auto& h = *events[4].values[0].histo;
  CHECK(h.min == -2.0);
  CHECK(h.max == 4.0);
  CHECK(h.num == 6.0);  // the NaN is left out
  CHECK(h.sum == doctest::Approx(2.5));
  CHECK(h.sum_squares == doctest::Approx(4 + 1 + 0.25 + 1 + 16));
  CHECK(h.bucket_limit == std::vector<double>{0.0, 2.0, 4.0});  // three buckets of width 2 from -2
  CHECK(h.bucket == std::vector<double>{2.0, 3.0, 1.0});         // {-2, -1}, {0, 0.5, 1}, {4}
}

TEST_CASE("the tests' reader refuses a record whose CRC is wrong, naming the byte") {
  tf_testing::temp_dir dir("typeflow_tensorboard_test_corrupt");
  fs::path file;
  {
    tf::io::event_file_writer writer(dir.path);
    file = writer.path();
    writer.add_scalar("epoch_loss", 1.0, 0);
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(file)) - 6);  // inside the last record's data
  f.put('\x7f');
  f.close();
  CHECK_THROWS_WITH_AS(tf_testing::read_event_file(file), doctest::Contains("the data's CRC is wrong at byte"),
                       std::runtime_error);
}

TEST_CASE("a fixture written by Google's protobuf library reads as the values its writer recorded") {
  // tests/reference/tensorboard_fixture.tfevents and .json: tensorboard_events.py write.
  const auto events = tf_testing::read_event_file(reference_path("tensorboard_fixture.tfevents"));
  std::ifstream in(reference_path("tensorboard_fixture.json"));
  REQUIRE(in);
  const auto expected = nlohmann::json::parse(in);
  REQUIRE(events.size() == expected.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    CAPTURE(i);
    const auto& e = expected[i];
    CHECK(events[i].wall_time == e["wall_time"].get<double>());
    CHECK(events[i].step == e["step"].get<std::int64_t>());
    CHECK(events[i].file_version == e["file_version"].get<std::string>());
    REQUIRE(events[i].values.size() == e["values"].size());
    for (std::size_t v = 0; v < events[i].values.size(); ++v) {
      const auto& got = events[i].values[v];
      const auto& want = e["values"][v];
      CHECK(got.tag == want["tag"].get<std::string>());
      CHECK(got.simple_value.has_value() == want.contains("simple_value"));
      if (got.simple_value && want.contains("simple_value"))
        CHECK(*got.simple_value == want["simple_value"].get<float>());
      CHECK(got.histo.has_value() == want.contains("histo"));
      if (got.histo && want.contains("histo")) {
        const auto& h = want["histo"];
        CHECK(got.histo->min == h["min"].get<double>());
        CHECK(got.histo->max == h["max"].get<double>());
        CHECK(got.histo->num == h["num"].get<double>());
        CHECK(got.histo->sum == h["sum"].get<double>());
        CHECK(got.histo->sum_squares == h["sum_squares"].get<double>());
        CHECK(got.histo->bucket_limit == h["bucket_limit"].get<std::vector<double>>());
        CHECK(got.histo->bucket == h["bucket"].get<std::vector<double>>());
      }
    }
  }
  CHECK(events[0].file_version == "brain.Event:2");
}

TEST_CASE("Google's protobuf library parses typeflow's event files to the values written") {
  const std::string python = python_with_protobuf();
  if (python.empty()) {
    MESSAGE("skipped: no python3 with Google's protobuf library (Debian's python3-protobuf; scripts/setup.sh installs it)");
    return;
  }
  tf_testing::temp_dir dir("typeflow_tensorboard_test_protobuf");
  fs::path file;
  const std::vector<float> weights{0.25f, -1.5f, 3.f, 3.f};
  {
    tf::io::event_file_writer writer(dir.path);
    file = writer.path();
    writer.add_scalar("epoch_loss", 1.0 / 3.0, 4);
    writer.add_scalar("batch_learning_rate", 1e-4, std::int64_t{1} << 40);
    writer.add_histogram("blocks.0.attn.qkv.kernel", tf::io::histogram::of(weights, 4), 2);
  }
  const auto parsed = nlohmann::json::parse(
      tf_testing::command_output(python + " " + reference_path("tensorboard_events.py").string() + " read " + file.string()));
  REQUIRE(parsed.size() == 4);
  CHECK(parsed[0]["file_version"] == "brain.Event:2");
  CHECK(parsed[1]["step"] == 4);
  CHECK(parsed[1]["values"][0]["tag"] == "epoch_loss");
  CHECK(parsed[1]["values"][0]["simple_value"].get<float>() == static_cast<float>(1.0 / 3.0));
  CHECK(parsed[2]["step"].get<std::int64_t>() == std::int64_t{1} << 40);
  CHECK(parsed[2]["values"][0]["simple_value"].get<float>() == 1e-4f);
  const auto& h = parsed[3]["values"][0]["histo"];
  CHECK(parsed[3]["values"][0]["tag"] == "blocks.0.attn.qkv.kernel");
  CHECK(h["min"] == -1.5);
  CHECK(h["max"] == 3.0);
  CHECK(h["num"] == 4.0);
  CHECK(h["sum"].get<double>() == doctest::Approx(4.75));
  CHECK(h["bucket"].get<std::vector<double>>() == std::vector<double>{1, 1, 0, 2});
  CHECK(h["bucket_limit"].get<std::vector<double>>().back() == 3.0);
}

TEST_CASE("tensorboard in fit: Keras's train and validation directories, epoch and batch scalars, histograms") {
  tf_testing::temp_dir dir("typeflow_tensorboard_test_fit");
  toy_data toy(64);
  auto train = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  auto validation = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{3};
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  tf::callbacks::tensorboard board(dir.path / "logs", {.histogram_freq = 2, .update_freq = "batch"});
  const auto history = model.fit(train, {.epochs = 3, .validation_data = validation, .callbacks = {&board}, .verbose = 0});
  REQUIRE(history.epochs() == 3);

  const auto train_scalars = scalars_of(tf_testing::only_event_file(dir.path / "logs" / "train"));
  const auto validation_scalars = scalars_of(tf_testing::only_event_file(dir.path / "logs" / "validation"));
  // Epoch values at steps 0, 1, 2: History's, in float32.
  for (const char* name : {"loss", "accuracy", "learning_rate"}) {
    CAPTURE(name);
    const auto& series = train_scalars.at(std::string("epoch_") + name);
    REQUIRE(series.size() == 3);
    for (int e = 0; e < 3; ++e) {
      CHECK(series[static_cast<std::size_t>(e)].first == e);
      CHECK(series[static_cast<std::size_t>(e)].second == static_cast<float>(history[name][static_cast<std::size_t>(e)]));
    }
  }
  CHECK(train_scalars.contains("epoch_input_wait_fraction"));
  CHECK_FALSE(train_scalars.contains("epoch_val_loss"));
  // Validation: val_loss as epoch_loss in its own directory, and against the batch count.
  const auto& val_loss = validation_scalars.at("epoch_loss");
  REQUIRE(val_loss.size() == 3);
  for (int e = 0; e < 3; ++e) CHECK(val_loss[static_cast<std::size_t>(e)].second == static_cast<float>(history["val_loss"][static_cast<std::size_t>(e)]));
  const auto& vs_iterations = validation_scalars.at("evaluation_loss_vs_iterations");
  REQUIRE(vs_iterations.size() == 3);
  CHECK(vs_iterations[2].first == 12);  // 3 epochs of 4 batches
  // Batch values after every batch, counted over the run: steps 1 .. 12.
  const auto& batch_loss = train_scalars.at("batch_loss");
  REQUIRE(batch_loss.size() == 12);
  for (std::size_t i = 0; i < batch_loss.size(); ++i) CHECK(batch_loss[i].first == static_cast<std::int64_t>(i + 1));
  CHECK(batch_loss[3].second == train_scalars.at("epoch_loss")[0].second);  // the epoch's last running mean

  // Histograms every second epoch (0 and 2), one per parameter tensor, of its real elements.
  std::map<std::string, std::vector<std::int64_t>> histogram_steps;
  for (const auto& event : tf_testing::read_event_file(tf_testing::only_event_file(dir.path / "logs" / "train")))
    for (const auto& value : event.values)
      if (value.histo) {
        histogram_steps[value.tag].push_back(event.step);
        const auto parameter = tf::parameter_table<toy_net>::find(value.tag);
        CHECK(value.histo->num == static_cast<double>(parameter.size));
      }
  CHECK(histogram_steps.size() == 4);  // two kernels, two biases
  CHECK(histogram_steps["layers.1.kernel"] == std::vector<std::int64_t>{0, 2});
  const auto kernel = model.parameter("layers.3.kernel");
  double sum = 0;
  for (float v : kernel) sum += v;
  for (const auto& event : tf_testing::read_event_file(tf_testing::only_event_file(dir.path / "logs" / "train")))
    for (const auto& value : event.values)
      if (value.histo && value.tag == "layers.3.kernel" && event.step == 2)
        CHECK(value.histo->sum == doctest::Approx(sum));  // the last epoch's weights
}

TEST_CASE("tensorboard: update_freq as a number of batches, and arguments it refuses") {
  tf_testing::temp_dir dir("typeflow_tensorboard_test_every");
  toy_data toy(64);
  auto train = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{3};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::callbacks::tensorboard board({.log_dir = dir.path, .update_freq = 3});
  model.fit(train, {.epochs = 2, .callbacks = {&board}, .verbose = 0});
  const auto scalars = scalars_of(tf_testing::only_event_file(dir.path / "train"));
  std::vector<std::int64_t> steps;
  for (const auto& [step, value] : scalars.at("batch_loss")) steps.push_back(step);
  CHECK(steps == std::vector<std::int64_t>{3, 6});  // of 8 batches
  CHECK_FALSE(fs::exists(dir.path / "validation"));  // no validation data, no directory

  CHECK_THROWS_WITH_AS(tf::callbacks::tensorboard({.update_freq = "often"}), doctest::Contains("\"often\""),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(tf::callbacks::tensorboard({.update_freq = 0}), doctest::Contains("at least 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(tf::callbacks::tensorboard({.histogram_freq = -1}), doctest::Contains("histogram_freq"),
                       std::invalid_argument);
  // A log directory that cannot be made: a file stands in its way.
  std::ofstream(dir.path / "blocked") << "x";
  tf::callbacks::tensorboard blocked(dir.path / "blocked");
  CHECK_THROWS_WITH_AS(model.fit(train, {.epochs = 1, .callbacks = {&blocked}, .verbose = 0}),
                       doctest::Contains("cannot create the log directory"), std::runtime_error);
}
