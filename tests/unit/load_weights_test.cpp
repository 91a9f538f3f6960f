// model.load_weights(path, options): weights another model wrote, under a
// renaming, into a model with more or fewer tensors, with shapes that
// differ (skip_mismatch), and in 16- or 64-bit floats; each refusal's message.
// And save_weights(path, options), which names the file's tensors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/test_support.hpp"

namespace tf = typeflow;
using typeflow::testing::message_of;
using typeflow::testing::temp_dir;

namespace {

using base = tf::sequential<tf::input<6>, tf::dense<8>, tf::relu, tf::dense<4>>;  // layers.1 (6, 8), layers.3 (8, 4)
using wider_head = tf::sequential<tf::input<6>, tf::dense<8>, tf::relu, tf::dense<5>>;
using deeper = tf::sequential<tf::input<6>, tf::dense<8>, tf::relu, tf::dense<4>, tf::relu, tf::dense<3>>;
using shifted = tf::sequential<tf::input<6>, tf::dense<8>, tf::relu, tf::dropout<0.25f>, tf::dense<4>>;  // layers.1, layers.4

template <class Model>
std::vector<float> values_of(Model& model, std::string_view name) {
  const auto view = model.parameter(name);
  return {view.begin(), view.end()};
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("load_weights renames the file's tensors with a function") {
  temp_dir dir;
  tf::model<base> source{1};
  source.save_weights(dir.path / "base.safetensors");
  tf::model<shifted> target{2};
  const auto report = target.load_weights(
      dir.path / "base.safetensors",
      {.rename = [](std::string_view name) {
        return name.starts_with("layers.3.") ? "layers.4." + std::string(name.substr(9)) : std::string(name);
      }});
  CHECK(report.loaded == std::vector<std::string>{"layers.1.kernel", "layers.1.bias", "layers.4.kernel", "layers.4.bias"});
  CHECK(values_of(target, "layers.4.kernel") == values_of(source, "layers.3.kernel"));
  CHECK(values_of(target, "layers.1.kernel") == values_of(source, "layers.1.kernel"));

  // Without the renaming, both sides' unmatched names are listed, and the file.
  const std::string message =
      message_of<std::runtime_error>([&] { target.load_weights(dir.path / "base.safetensors", {}); });
  CHECK(contains(message, "cannot load weights from \"" + (dir.path / "base.safetensors").string() + "\" into the model:"));
  CHECK(contains(message, "in the model, not in the file (2): layers.4.kernel, layers.4.bias"));
  CHECK(contains(message, "in the file, not in the model (2): layers.3.kernel, layers.3.bias"));
  CHECK(contains(message, "options.rename maps the file's to the model's"));
}

TEST_CASE("load_weights renames the file's tensors with a table, and a rename to the empty string leaves a tensor out") {
  temp_dir dir;
  // Another framework's names, (in, out) kernels as typeflow's.
  const std::vector<float> w1(6 * 8, 0.5f), b1(8, 0.25f), w2(8 * 4, -1.f), b2(4, 2.f), step{7.f};
  const std::vector<tf::io::tensor_to_write> tensors{
      {"encoder.weight", "F32", {6, 8}, w1.data(), w1.size() * 4},
      {"encoder.bias", "F32", {8}, b1.data(), b1.size() * 4},
      {"head.weight", "F32", {8, 4}, w2.data(), w2.size() * 4},
      {"head.bias", "F32", {4}, b2.data(), b2.size() * 4},
      {"optimizer.step", "F32", {1}, step.data(), 4},
  };
  tf::io::write_safetensors(dir.path / "other.safetensors", tensors);
  tf::model<base> model{1};
  const auto report = model.load_weights(dir.path / "other.safetensors",
                                         {.rename = tf::io::rename_table({{"encoder.weight", "layers.1.kernel"},
                                                                          {"encoder.bias", "layers.1.bias"},
                                                                          {"head.weight", "layers.3.kernel"},
                                                                          {"head.bias", "layers.3.bias"},
                                                                          {"optimizer.step", ""}})});
  CHECK(report.loaded.size() == 4);
  CHECK(report.left_out == std::vector<std::string>{"optimizer.step"});
  CHECK(values_of(model, "layers.1.kernel") == w1);
  CHECK(values_of(model, "layers.3.bias") == b2);

  // Two file tensors renamed to one model name: refused, naming both.
  const std::string message = message_of<std::runtime_error>([&] {
    model.load_weights(dir.path / "other.safetensors", {.rename = [](std::string_view name) {
                         return name.ends_with("bias") ? std::string("layers.1.bias") : std::string(name);
                       }});
  });
  CHECK(contains(message, "its tensors \"encoder.bias\" and \"head.bias\" are both renamed to \"layers.1.bias\""));
}

TEST_CASE("load_weights with skip_mismatch keeps the model's values where a shape differs, with a warning") {
  temp_dir dir;
  tf::model<base> source{1};
  source.save_weights(dir.path / "base.safetensors");
  tf::model<wider_head> model{2};
  const std::vector<float> head_before = values_of(model, "layers.3.kernel");

  const std::string message =
      message_of<std::runtime_error>([&] { model.load_weights(dir.path / "base.safetensors", {}); });
  CHECK(contains(message, "shapes differ (2), the first: layers.3.kernel is (8, 5) in the model and (8, 4) in the file"));
  CHECK(contains(message, "[skip_mismatch keeps the model's values]"));
  CHECK_FALSE(contains(message, "not in the file"));
  CHECK(values_of(model, "layers.1.kernel") != values_of(source, "layers.1.kernel"));  // nothing copied

  std::vector<std::string> warnings;
  const auto report = model.load_weights(dir.path / "base.safetensors",
                                         {.skip_mismatch = true, .warn = [&](const std::string& w) { warnings.push_back(w); }});
  CHECK(report.skipped == std::vector<std::string>{"layers.3.kernel", "layers.3.bias"});
  CHECK(report.loaded == std::vector<std::string>{"layers.1.kernel", "layers.1.bias"});
  REQUIRE(warnings.size() == 2);
  CHECK(contains(warnings[0], "load_weights: skipping layers.3.kernel from \"" +
                                  (dir.path / "base.safetensors").string() +
                                  "\": shape (8, 4) in the file, (8, 5) in the model (skip_mismatch)"));
  CHECK(values_of(model, "layers.3.kernel") == head_before);
  CHECK(values_of(model, "layers.1.kernel") == values_of(source, "layers.1.kernel"));
}

TEST_CASE("load_weights with allow_missing loads a smaller model's weights into a larger one") {
  temp_dir dir;
  tf::model<base> body{1};
  body.save_weights(dir.path / "body.safetensors");
  tf::model<deeper> model{2};
  const std::vector<float> new_head = values_of(model, "layers.5.kernel");

  const std::string message =
      message_of<std::runtime_error>([&] { model.load_weights(dir.path / "body.safetensors", {}); });
  CHECK(contains(message, "in the model, not in the file (2): layers.5.kernel, layers.5.bias  [allow_missing keeps their values]"));
  CHECK_FALSE(contains(message, "in the file, not in the model"));

  const auto report = model.load_weights(dir.path / "body.safetensors", {.allow_missing = true});
  CHECK(report.missing == std::vector<std::string>{"layers.5.kernel", "layers.5.bias"});
  CHECK(values_of(model, "layers.3.kernel") == values_of(body, "layers.3.kernel"));
  CHECK(values_of(model, "layers.5.kernel") == new_head);
}

TEST_CASE("load_weights with allow_unexpected leaves the file's extra tensors unread, and only then") {
  temp_dir dir;
  tf::model<deeper> bigger{1};
  bigger.save_weights(dir.path / "deeper.safetensors");
  tf::model<base> model{2};
  const std::string message =
      message_of<std::runtime_error>([&] { model.load_weights(dir.path / "deeper.safetensors", {}); });
  CHECK(contains(message, "in the file, not in the model (2): layers.5.kernel, layers.5.bias  [allow_unexpected leaves them unread]"));
  // allow_missing is not the option for that.
  CHECK_THROWS_AS(model.load_weights(dir.path / "deeper.safetensors", {.allow_missing = true}), std::runtime_error);

  const auto report = model.load_weights(dir.path / "deeper.safetensors", {.allow_unexpected = true});
  CHECK(report.unexpected == std::vector<std::string>{"layers.5.kernel", "layers.5.bias"});
  CHECK(values_of(model, "layers.3.bias") == values_of(bigger, "layers.3.bias"));
}

TEST_CASE("load_weights converts F16, BF16 and F64 tensors to float32 and refuses other dtypes by name") {
  temp_dir dir;
  tf::model<base> model{1};
  const std::vector<float> w1 = values_of(model, "layers.1.kernel"), b1 = values_of(model, "layers.1.bias"),
                           w2 = values_of(model, "layers.3.kernel"), b2 = values_of(model, "layers.3.bias");
  std::vector<std::uint16_t> w1_f16, b1_bf16;
  for (float v : w1) w1_f16.push_back(tf::f16(v * 3.f).bits());
  for (float v : b1) b1_bf16.push_back(tf::bf16(v + 1.f).bits());
  std::vector<double> w2_f64;
  for (float v : w2) w2_f64.push_back(double(v) / 3.0);
  const std::vector<std::int32_t> b2_i32(4, 1);
  std::vector<tf::io::tensor_to_write> tensors{
      {"layers.1.kernel", "F16", {6, 8}, w1_f16.data(), w1_f16.size() * 2},
      {"layers.1.bias", "BF16", {8}, b1_bf16.data(), b1_bf16.size() * 2},
      {"layers.3.kernel", "F64", {8, 4}, w2_f64.data(), w2_f64.size() * 8},
      {"layers.3.bias", "F32", {4}, b2.data(), b2.size() * 4},
  };
  tf::io::write_safetensors(dir.path / "mixed.safetensors", tensors);

  tf::model<base> loaded{2};
  const auto report = loaded.load_weights(dir.path / "mixed.safetensors", {});
  CHECK(report.loaded.size() == 4);
  const std::vector<float> k1 = values_of(loaded, "layers.1.kernel"), c1 = values_of(loaded, "layers.1.bias"),
                           k2 = values_of(loaded, "layers.3.kernel");
  for (std::size_t i = 0; i < w1.size(); ++i) REQUIRE(k1[i] == static_cast<float>(tf::f16(w1[i] * 3.f)));
  for (std::size_t i = 0; i < b1.size(); ++i) REQUIRE(c1[i] == static_cast<float>(tf::bf16(b1[i] + 1.f)));
  for (std::size_t i = 0; i < w2.size(); ++i) REQUIRE(k2[i] == static_cast<float>(double(w2[i]) / 3.0));
  // The one-argument load_weights stays exact: float32 only.
  CHECK(contains(message_of<std::runtime_error>([&] { loaded.load_weights(dir.path / "mixed.safetensors"); }),
                 "layers.1.kernel: dtype F16 in file, F32 expected"));

  tensors[3] = {"layers.3.bias", "I32", {4}, b2_i32.data(), b2_i32.size() * 4};
  tf::io::write_safetensors(dir.path / "int.safetensors", tensors);
  const std::vector<float> before = values_of(loaded, "layers.1.kernel");
  CHECK(contains(message_of<std::runtime_error>([&] { loaded.load_weights(dir.path / "int.safetensors", {}); }),
                 "tensor layers.3.bias has dtype I32; load_weights reads F32, and F16, BF16 and F64 converted to float32"));
  CHECK(values_of(loaded, "layers.1.kernel") == before);  // refused before anything was copied
}

TEST_CASE("save_weights with options names the file's tensors, leaves out those renamed to the empty string, and writes the metadata") {
  temp_dir dir;
  tf::model<base> model{1};
  model.save_weights(dir.path / "named.safetensors",
                     {.rename = [](std::string_view name) {
                        return name.starts_with("layers.3.") ? std::string() : "encoder." + std::string(name.substr(9));
                      },
                      .metadata = {{"format", "pt"}}});
  const auto file = tf::io::safetensors_file::read(dir.path / "named.safetensors");
  REQUIRE(file.tensors().size() == 2);
  CHECK(file.tensors()[0].name == "encoder.kernel");
  CHECK(file.tensors()[1].name == "encoder.bias");
  CHECK(file.metadata().at("format") == "pt");
  CHECK(tf::io::read_float32(file, "encoder.kernel") == values_of(model, "layers.1.kernel"));

  // The names go back through the inverse renaming.
  tf::model<base> other{2};
  const auto report =
      other.load_weights(dir.path / "named.safetensors",
                         {.rename = tf::io::replace_prefix("encoder.", "layers.1."), .allow_missing = true});
  CHECK(report.missing == std::vector<std::string>{"layers.3.kernel", "layers.3.bias"});
  CHECK(values_of(other, "layers.1.bias") == values_of(model, "layers.1.bias"));
}
