// functional<...> and graph<...>: a graph written as a chain trains bit for
// bit like the sequential network, every gradient of a graph with merges
// and a shared layer matches finite differences, and the gradient buffers'
// plan matches one worked out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/gradient_check.hpp"
#include "../support/reference_json.hpp"
#include "../support/resume_fixture.hpp"

namespace tf = typeflow;
namespace tf_testing = typeflow::testing;

namespace {

using chain = tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::dense<16>, tf::tanh, tf::dense<4>>;
using chain_as_graph = tf::functional<tf::input<12>,                      //
                                      tf::node<"d1", tf::dense<32>, "input">,  //
                                      tf::node<"r", tf::relu, "d1">,           //
                                      tf::node<"d2", tf::dense<16>, "r">,      //
                                      tf::node<"t", tf::tanh, "d2">,           //
                                      tf::node<"logits", tf::dense<4>, "t">>;

auto batch_number(int index) { return tf_testing::numbered_batch<32, 12, 4>(index); }

template <class Model>
std::vector<float> all_parameters(Model& m) {
  std::vector<float> all;
  for (const auto& spec : m.parameter_specs()) {
    auto view = m.parameter(spec.name);
    for (std::size_t i = 0; i < view.size(); ++i) all.push_back(view[i]);
  }
  return all;
}

}  // namespace

TEST_CASE("a graph written as a chain trains bit for bit like the same sequential network") {
  tf::model<chain> a{5};
  tf::model<chain_as_graph> b{5};
  // The graph names its tensors after its nodes; give it the chain's values.
  const auto specs_a = a.parameter_specs();
  const auto specs_b = b.parameter_specs();
  REQUIRE(specs_a.size() == specs_b.size());
  CHECK(specs_b[0].name == "d1.kernel");
  CHECK(specs_b[5].name == "logits.bias");
  for (std::size_t i = 0; i < specs_a.size(); ++i) {
    auto from = a.parameter(specs_a[i].name);
    auto to = b.parameter(specs_b[i].name);
    REQUIRE(from.size() == to.size());
    for (std::size_t j = 0; j < from.size(); ++j) to[j] = from[j];
  }
  const tf::losses::sparse_categorical_crossentropy loss{.from_logits = true};
  a.compile(tf::optimizers::adam{.learning_rate = 1e-2f}, loss);
  b.compile(tf::optimizers::adam{.learning_rate = 1e-2f}, loss);
  for (int step = 0; step < 4; ++step) {
    const auto batch = batch_number(step);
    const float la = a.train_on_batch(batch);
    const float lb = b.train_on_batch(batch);
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  }
  const auto pa = all_parameters(a), pb = all_parameters(b);
  REQUIRE(pa.size() == pb.size());
  CHECK(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)) == 0);
  CHECK(tf::model<chain_as_graph>::network::parameter_count == tf::model<chain>::network::parameter_count);
}

namespace {

// a -> b -> c, and a skip from a to the sum: a is read twice.
using planned = tf::graph<tf::node<"a", tf::dense<16>, "input">,  // 1
                          tf::node<"b", tf::dense<16>, "a">,      // 2
                          tf::node<"c", tf::dense<16>, "b">,      // 3
                          tf::node<"s", tf::add, "c", "a">,       // 4
                          tf::node<"out", tf::dense<4>, "s">>;    // 5
using planned_net = tf::sequential<tf::input<8>, planned>;
using planned_graph = planned_net::layer<1>;

}  // namespace

TEST_CASE("the graph's gradient buffers follow the plan worked out by hand") {
  // Lives in backward steps (a buffer is written by its last reader's
  // backward and read by its own): a [1, 4], b [2, 3], c [3, 4], s [4, 5];
  // out's gradient is the graph's d_out. 16 floats are 64 bytes a sample.
  // First fit from the top: s at 0; a overlaps s: 64; c overlaps s and a:
  // 128; b overlaps a and c but not s: 0, sharing s's bytes.
  using g = planned_graph;
  CHECK(g::gradient_buffer[5] == g::external_gradient);
  CHECK(g::buffer_life[1] == std::array<std::size_t, 2>{1, 4});
  CHECK(g::buffer_life[2] == std::array<std::size_t, 2>{2, 3});
  CHECK(g::buffer_life[3] == std::array<std::size_t, 2>{3, 4});
  CHECK(g::buffer_life[4] == std::array<std::size_t, 2>{4, 5});
  CHECK(g::gradient_offset[4] == 0);
  CHECK(g::gradient_offset[1] == 64);
  CHECK(g::gradient_offset[3] == 128);
  CHECK(g::gradient_offset[2] == 0);
  CHECK(g::gradient_area_per_sample == 192);
  // s's backward writes a's gradient first; b's adds to it through the spare buffer.
  CHECK(g::edge_writes[4][1]);
  CHECK_FALSE(g::edge_writes[2][0]);
  CHECK(g::spare_per_sample == 64);
  // Kept: the outputs of a, b, c and s (out's is the graph's output).
  CHECK(g::kept_per_sample == 4 * 64);
}

namespace {

// Two uses of one dense (a, then b on a's output), the smooth merges, dot, a
// three-way concatenation, an in-place layer, one node read twice by one
// merge, and the input read by three nodes. The dense before the graph is
// trained too, so its gradient checks the gradient the graph passes back to
// its input. (maximum and minimum have kinks that finite differences step
// over; their routing is checked exactly below.)
using merges = tf::graph<tf::node<"a", tf::dense<8>, "input">,                 // 1
                         tf::node<"at", tf::tanh, "a">,                        // 2 (fused into a)
                         tf::node<"b", tf::shared<"a">, "at">,                 // 3: a's weights again
                         tf::node<"m", tf::multiply, "at", "b", "input">,      // 4
                         tf::node<"d", tf::subtract, "m", "b">,                // 5
                         tf::node<"avg", tf::average, "d", "at", "input">,     // 6
                         tf::node<"dp", tf::dot, "at", "b">,                   // 7: (1)
                         tf::node<"cat", tf::concatenate<>, "avg", "b", "dp">,  // 8: (17)
                         tf::node<"ln", tf::layer_norm, "cat">,                // 9, in place
                         tf::node<"sum", tf::add, "ln", "ln">,                 // 10: one node read twice
                         tf::node<"out", tf::dense<4>, "sum">>;                // 11
using merges_net = tf::sequential<tf::input<6>, tf::dense<8>, tf::tanh, merges>;

// Concatenation along either axis of (positions, channels) values, and views.
using axes = tf::graph<tf::node<"p", tf::dense<6>, "input">,                 // (4, 6)
                       tf::node<"q", tf::dense<3>, "input">,                 // (4, 3)
                       tf::node<"c1", tf::concatenate<-1>, "p", "q">,        // (4, 9)
                       tf::node<"f1", tf::flatten, "c1">,                    // (36)
                       tf::node<"c0", tf::concatenate<0>, "p", "input">,     // (8, 6)
                       tf::node<"f0", tf::flatten, "c0">,                    // (48)
                       tf::node<"all", tf::concatenate<>, "f1", "f0">,       // (84)
                       tf::node<"out", tf::dense<4>, "all">>;
using axes_net = tf::sequential<tf::input<4, 6>, tf::dense<6>, axes>;

template <class Net, int... Dims>
void check_every_gradient() {
  using features = tf::data::tensor_value<float, tf::shape<Dims...>>;
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  tf::data::batch_of<8, features, label> batch;
  const tf::random_stream rng{17, 3};
  for (std::size_t i = 0; i < batch.features.size(); ++i) batch.features[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < 8; ++i) batch.labels[i] = (3 * i + 1) % 4;
  batch.valid = 8;
  tf::model<Net> net{11};
  net.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  net.train_on_batch(batch);
  auto dataset = tf::data::from_tensor_slices<tf::shape<Dims...>, tf::shape<>>(batch.features, batch.labels) |
                 tf::data::batch<8>;
  CHECK(tf_testing::check_gradients_of(net, dataset, [](const std::string&) { return true; }) > 0);
}

}  // namespace

TEST_CASE("every gradient of a graph with merges, a shared layer and its input read thrice matches finite differences") {
  check_every_gradient<merges_net, 6>();
  const auto specs = tf::model<merges_net>{1}.parameter_specs();
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  // The shared layer's tensors appear once, under the node that declares it.
  CHECK(names == std::vector<std::string>{"layers.1.kernel", "layers.1.bias", "layers.3.a.kernel", "layers.3.a.bias",
                                          "layers.3.ln.gamma", "layers.3.ln.beta", "layers.3.out.kernel",
                                          "layers.3.out.bias"});
  // Inside another combinator the graph is one leaf, named like any child.
  using nested = tf::sequential<tf::input<6>, tf::residual<tf::dense<6>, tf::graph<tf::node<"h", tf::dense<6>, "input">>>>;
  std::vector<std::string> nested_names;
  for (const auto& s : tf::model<nested>{1}.parameter_specs()) nested_names.push_back(s.name);
  CHECK(nested_names == std::vector<std::string>{"layers.1.dense.kernel", "layers.1.dense.bias",
                                                 "layers.1.graph.h.kernel", "layers.1.graph.h.bias"});
}

TEST_CASE("concatenate joins (positions, channels) values along either axis, and its gradients match finite differences") {
  check_every_gradient<axes_net, 4, 6>();
}

TEST_CASE("maximum and minimum route each element's gradient to the input that won, ties to the first") {
  using three = tf::shape<4>;
  using max_facts = tf::merge_binding<tf::maximum, three, three, three>;
  using min_facts = tf::merge_binding<tf::minimum, three, three, three>;
  tf::backend::cpu::context context;
  // Two samples of four; sample 1 holds ties.
  const std::vector<float> x0{1, 5, -2, 0, 3, 3, 1, 7}, x1{2, 4, -3, 0, 3, 2, 1, 7}, x2{0, 6, -1, -1, 1, 3, 1, 8};
  std::vector<float> out(8), winners(8);
  std::vector<float> d_out{1, 2, 3, 4, 5, 6, 7, 8}, d_in(8);

  tf::merge_executor<max_facts, 2, tf::cpu> maxima({x0.data(), x1.data(), x2.data()}, out.data(),
                                                   reinterpret_cast<std::byte*>(winners.data()), &context);
  maxima.forward();
  CHECK(out == std::vector<float>{2, 6, -1, 0, 3, 3, 1, 8});
  maxima.backward_input(0, d_out.data(), d_in.data());
  CHECK(d_in == std::vector<float>{0, 0, 0, 4, 5, 6, 7, 0});  // ties (3, 3, 1) go to input 0
  maxima.backward_input(1, d_out.data(), d_in.data());
  CHECK(d_in == std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0});
  maxima.backward_input(2, d_out.data(), d_in.data());
  CHECK(d_in == std::vector<float>{0, 2, 3, 0, 0, 0, 0, 8});

  tf::merge_executor<min_facts, 2, tf::cpu> minima({x0.data(), x1.data(), x2.data()}, out.data(),
                                                   reinterpret_cast<std::byte*>(winners.data()), &context);
  minima.forward();
  CHECK(out == std::vector<float>{0, 4, -3, -1, 1, 2, 1, 7});
  minima.backward_input(1, d_out.data(), d_in.data());
  CHECK(d_in == std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0});
  minima.backward_input(2, d_out.data(), d_in.data());
  CHECK(d_in == std::vector<float>{1, 0, 0, 4, 5, 0, 0, 0});
  minima.backward_input(0, d_out.data(), d_in.data());
  CHECK(d_in == std::vector<float>{0, 0, 0, 0, 0, 0, 7, 8});
}

TEST_CASE("summary() lists a functional model's nodes with the nodes each reads") {
  using block = tf::sequential<tf::dense<16>, tf::relu, tf::dense<16>>;
  using net = tf::functional<tf::input<16>,                           //
                             tf::node<"stem", tf::dense<16>, "input">,  //
                             tf::node<"block", block, "stem">,          //
                             tf::node<"sum", tf::add, "block", "stem">,  //
                             tf::node<"again", tf::shared<"stem">, "sum">,  //
                             tf::node<"logits", tf::dense<4>, "again">>;
  const std::string text = tf::summary_text<net>();
  MESSAGE(text);
  CHECK(text.find("Model: \"functional\"") != std::string::npos);
  CHECK(text.find("Connected to") != std::string::npos);
  const auto line_of = [&](const std::string& start) {
    const std::size_t at = text.find("\n " + start);
    REQUIRE(at != std::string::npos);
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  CHECK(line_of("sum (add)").ends_with("block, stem"));
  CHECK(line_of("stem (dense<16>)").find("272") != std::string::npos);  // 16 * 16 + 16
  CHECK(line_of("again (shared<\"stem\">)").ends_with("sum"));
  CHECK(line_of("  dense_1 (dense<16>)").find("272") != std::string::npos);  // the block's second dense
  CHECK(text.find("Total params: 884") != std::string::npos);  // 272 + 544 + 68: the shared use adds none
  // A sequential's table has no such column.
  CHECK(tf::summary_text<chain>().find("Connected to") == std::string::npos);
}

TEST_CASE("a graph trains under mixed_bfloat16, and under mirrored<2> like on one replica") {
  using wide = tf::sequential<tf::input<12>, tf::dense<8>, merges>;
  const auto train = [](auto& m, int steps) {
    m.compile(tf::optimizers::adam{.learning_rate = 1e-2f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
    std::vector<float> losses;
    for (int step = 0; step < steps; ++step) losses.push_back(m.train_on_batch(batch_number(step % 4)));
    return losses;
  };
  tf::model<wide, tf::mixed_bfloat16> bf16{3};
  const auto bf16_losses = train(bf16, 40);
  CHECK(std::isfinite(bf16_losses.back()));
  CHECK(bf16_losses.back() < 0.8f * bf16_losses.front());  // it learns the four batches

  tf::model<wide> single{3};
  tf::model<wide, tf::float32, tf::mirrored<2>> mirrored{3};
  train(single, 5);
  train(mirrored, 5);
  const auto a = single.parameter_region(), b = mirrored.parameter_region();
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(std::fabs(double{a[i]}), 1e-2));
  MESSAGE("largest relative difference, one replica against mirrored<2>: " << worst);
  CHECK(worst <= 1e-5);
}

namespace {

// tests/reference/graph_reference.py builds this network in PyTorch.
using reference_graph = tf::graph<tf::node<"a", tf::dense<8>, "input">,                //
                                  tf::node<"at", tf::tanh, "a">,                       //
                                  tf::node<"b", tf::shared<"a">, "at">,                //
                                  tf::node<"m", tf::multiply, "at", "b", "input">,     //
                                  tf::node<"x", tf::maximum, "m", "input">,            //
                                  tf::node<"d", tf::subtract, "x", "b">,               //
                                  tf::node<"avg", tf::average, "d", "at", "input">,    //
                                  tf::node<"n", tf::minimum, "avg", "b", "m">,         //
                                  tf::node<"dp", tf::dot, "at", "b">,                  //
                                  tf::node<"cat", tf::concatenate<>, "n", "b", "dp">,  //
                                  tf::node<"ln", tf::layer_norm, "cat">,               //
                                  tf::node<"sum", tf::add, "ln", "ln">,                //
                                  tf::node<"out", tf::dense<4>, "sum">>;
using reference_net = tf::sequential<tf::input<6>, tf::dense<8>, tf::tanh, reference_graph>;

}  // namespace

TEST_CASE("a graph with every merge and a shared layer matches PyTorch: the loss and every gradient") {
  const auto reference = tf_testing::read_reference("graph.json");
  tf::model<reference_net> net{1};
  tf_testing::load_reference_weights(net, reference);
  using features = tf::data::tensor_value<float, tf::shape<6>>;
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  tf::data::batch_of<8, features, label> batch;
  for (std::size_t i = 0; i < batch.features.size(); ++i) batch.features[i] = reference["features"][i].get<float>();
  for (int i = 0; i < 8; ++i) batch.labels[i] = reference["labels"][i].get<std::int32_t>();
  batch.valid = 8;
  net.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const float loss = net.train_on_batch(batch);
  CHECK(loss == doctest::Approx(reference["loss"].get<double>()).epsilon(1e-5));
  CHECK(tf_testing::check_reference_gradients(net, reference) == 6 * 8 + 8 + 8 * 8 + 8 + 17 + 17 + 17 * 4 + 4);
}
