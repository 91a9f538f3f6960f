// core/row_math.hpp, the per-row arithmetic the CUDA kernels run, proved on
// the CPU: its merges give the direct (double-precision) result whatever the
// split and order, and the kernels' arrangement of it (a row spread over a
// group of threads, merged in group_reduce_reference's order) reproduces the
// CPU layer_norm executor and losses::sparse_categorical_crossentropy.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <typeflow/core/row_math.hpp>
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
namespace rm = typeflow::row_math;

static_assert(rm::probability_epsilon == tf::losses::detail::probability_epsilon,
              "row_math's clip must be the CPU loss's (Keras's 1e-7)");

namespace {

constexpr int kWidths[] = {1, 3, 64, 127, 768, 1000, 4099};

std::vector<float> uniform(std::size_t count, float low, float high, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Pushes v[begin, end) into a fresh accumulator.
template <class T, class Push>
T push_all(const std::vector<float>& v, std::size_t begin, std::size_t end, T empty, Push push) {
  T a = empty;
  for (std::size_t i = begin; i < end; ++i) a = push(a, v[i]);
  return a;
}

// The row cut at random points into chunks, each pushed, then merged in a
// random order (every merge is between two adjacent-or-not partial results:
// the math is commutative, only rounding differs).
template <class T, class Push, class Merge>
T random_split_merge(const std::vector<float>& v, std::mt19937& rng, T empty, Push push, Merge merge) {
  std::vector<T> parts;
  std::size_t at = 0;
  while (at < v.size()) {
    const std::size_t len = std::uniform_int_distribution<std::size_t>(1, std::max<std::size_t>(1, v.size() / 5))(rng);
    const std::size_t end = std::min(v.size(), at + len);
    parts.push_back(push_all(v, at, end, empty, push));
    at = end;
  }
  parts.push_back(empty);  // an empty part changes nothing
  while (parts.size() > 1) {
    std::uniform_int_distribution<std::size_t> pick(0, parts.size() - 1);
    const std::size_t i = pick(rng);
    std::size_t j = pick(rng);
    if (i == j) j = (j + 1) % parts.size();
    const T merged = merge(parts[i], parts[j]);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
    parts[std::min(i, j)] = merged;
  }
  return parts[0];
}

// How the kernels lay a row of n floats over a group (row_math::gpu): the
// group size, and the float4 or scalar chunks of each thread.
int group_for(int n) {
  for (int group = 32; group <= 1024; group *= 2)
    if (n <= group * 8) return group;
  return 0;
}

// The columns thread t of `group` holds, in the order it pushes them: 8
// floats of a held row, or every chunk of a streamed one (1024 threads).
std::vector<int> columns_of(int t, int group, int n, bool vec, bool streamed = false) {
  std::vector<int> columns;
  const int width = vec ? 4 : 1;
  for (int i = 0; streamed || i < 8 / width; ++i) {
    const int first = (t + i * group) * width;
    if (first >= n) break;
    for (int e = 0; e < width && first + e < n; ++e) columns.push_back(first + e);  // a padded row's last chunk
  }
  return columns;
}

// A row reduced as the held-row and streamed kernels do: per-thread pushes,
// then group_reduce_reference.
template <class T, class Push, class Merge>
T kernel_order(const float* row, int n, bool vec, T empty, Push push, Merge merge) {
  const bool streamed = group_for(n) == 0;
  const int group = streamed ? 1024 : group_for(n);
  std::vector<T> threads(group, empty);
  for (int t = 0; t < group; ++t)
    for (int j : columns_of(t, group, n, vec, streamed)) threads[t] = push(threads[t], row[j]);
  return rm::group_reduce_reference(threads.data(), group, empty, merge);
}

double direct_log_sum_exp(const std::vector<float>& v) {
  double max = -INFINITY;
  for (float z : v) max = std::max(max, double{z});
  double sum = 0;
  for (float z : v) sum += std::exp(z - max);
  return max + std::log(sum);
}

void check_mean_m2(const rm::mean_m2& s, const std::vector<float>& v, const char* how) {
  double sum = 0;
  for (float x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  double m2 = 0;
  for (float x : v) m2 += (x - mean) * (x - mean);
  INFO(std::string(how) << ", n = " << v.size() << ", relative M2 error " << std::fabs(s.m2 - m2) / m2);
  CHECK(s.count == static_cast<float>(v.size()));
  CHECK(std::fabs(s.mean - mean) <= 1e-6 * (1 + std::fabs(mean)));
  // A float mean carries up to half an ulp of |mean|, so deviations do too:
  // M2's relative error grows with |mean| / std (a one-pass sum of squares's
  // grows with its square, ~3e-2 at the offset used below).
  const double spread = std::sqrt(m2 / static_cast<double>(v.size()));
  const double relative = 1e-5 + (spread > 0 ? 1.2e-7 * std::fabs(mean) / spread : 0.0);
  CHECK(std::fabs(s.m2 - m2) <= relative * m2 + 1e-6);
}

// ---------------------------------------------------------------------------
// The CPU layer_norm executor on buffers of the test's own (as in
// normalization_test.cpp).

template <int Features, int Rows>
struct cpu_layer_norm {
  using layer = typename tf::layer_norm::template bind<tf::shape<Features>, tf::layer_context<1, tf::dense<5>, void>>;
  static constexpr std::size_t count = static_cast<std::size_t>(Rows) * Features;

  std::vector<float> in, out, d_out, d_in, params, grads;
  std::vector<std::byte> workspace;
  tf::run_state run{.training = true, .seed = 1, .step = 1};
  tf::executor<tf::layer_norm, layer, Rows, tf::cpu> executor;

  cpu_layer_norm()
      : in(count), out(count), d_out(count), d_in(count), params(layer::params::floats),
        grads(layer::params::floats), workspace(Rows * layer::workspace_bytes_per_sample), executor(io()) {
    executor.bind(nullptr);
  }
  tf::layer_io<tf::cpu> io() {
    tf::layer_io<tf::cpu> io;
    io.in = in.data();
    io.out = out.data();
    io.d_in = d_in.data();
    io.d_out = d_out.data();
    io.params = params.data();
    io.grads = grads.data();
    io.workspace = workspace.data();
    io.run = &run;
    return io;
  }
  float* gamma() { return params.data() + layer::params::template offset<0>; }
  float* beta() { return params.data() + layer::params::template offset<1>; }
  const float* d_gamma() { return grads.data() + layer::params::template offset<0>; }
  const float* d_beta() { return grads.data() + layer::params::template offset<1>; }
  const float* stats() { return reinterpret_cast<const float*>(workspace.data()); }  // (rows, 2): mean, 1/std
};

// layer_norm as the held-row kernels compute it, from row_math alone.
struct kernel_layer_norm {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};

kernel_layer_norm emulate_layer_norm(const std::vector<float>& x, const float* gamma, const float* beta,
                                     const std::vector<float>& dy, int rows, int n, float epsilon, bool vec) {
  kernel_layer_norm k;
  k.y.resize(x.size());
  k.dx.resize(x.size());
  k.mean.resize(rows);
  k.rstd.resize(rows);
  std::vector<double> dgamma(n, 0.0), dbeta(n, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<std::size_t>(r) * n;
    const float* dyr = dy.data() + static_cast<std::size_t>(r) * n;
    const rm::mean_m2 s = kernel_order(xr, n, vec, rm::mean_m2_empty(), rm::mean_m2_push, rm::mean_m2_merger{});
    const float mu = s.mean, inverse_std = rm::layer_norm_inverse_std(s, epsilon);
    k.mean[r] = mu;
    k.rstd[r] = inverse_std;
    // Backward's row sums, per thread then in the group's order.
    const int group = group_for(n);
    std::vector<rm::sum_pair> threads(group, rm::sum_pair{0.f, 0.f});
    for (int t = 0; t < group; ++t)
      for (int j : columns_of(t, group, n, vec)) {
        const float h = rm::layer_norm_normalize(xr[j], mu, inverse_std);
        const float g = dyr[j] * gamma[j];
        threads[t].first += g;
        threads[t].second += g * h;
        k.y[static_cast<std::size_t>(r) * n + j] = rm::layer_norm_output(h, gamma[j], beta[j]);
        dgamma[j] += dyr[j] * h;
        dbeta[j] += dyr[j];
      }
    const rm::sum_pair sums =
        rm::group_reduce_reference(threads.data(), group, rm::sum_pair{0.f, 0.f}, rm::sum_pair_merger{});
    const float mean_g = sums.first / static_cast<float>(n), mean_g_xhat = sums.second / static_cast<float>(n);
    for (int j = 0; j < n; ++j)
      k.dx[static_cast<std::size_t>(r) * n + j] = rm::layer_norm_input_gradient(
          dyr[j] * gamma[j], rm::layer_norm_normalize(xr[j], mu, inverse_std), inverse_std, mean_g, mean_g_xhat);
  }
  k.dgamma.assign(dgamma.begin(), dgamma.end());
  k.dbeta.assign(dbeta.begin(), dbeta.end());
  return k;
}

void check_near(const char* what, const float* got, const float* want, std::size_t count, double absolute,
                double relative) {
  std::size_t failures = 0, first = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (!(std::fabs(double{got[i]} - want[i]) <= absolute + relative * std::fabs(double{want[i]})) && failures++ == 0)
      first = i;
  INFO(what << ": " << failures << " of " << count << " differ; first at " << first << ": " << got[first] << " vs "
            << want[first]);
  CHECK(failures == 0);
}

template <int Features>
void check_layer_norm_against_cpu(bool vec) {
  constexpr int rows = 5;
  cpu_layer_norm<Features, rows> cpu;
  // Copied in: the executor holds the buffers' addresses.
  const auto in = uniform(cpu.count, -2.f, 3.f, 11 + Features), d_out = uniform(cpu.count, -1.f, 1.f, 12 + Features);
  std::copy(in.begin(), in.end(), cpu.in.begin());
  std::copy(d_out.begin(), d_out.end(), cpu.d_out.begin());
  const auto gamma = uniform(Features, 0.5f, 1.5f, 13), beta = uniform(Features, -1.f, 1.f, 14);
  std::copy(gamma.begin(), gamma.end(), cpu.gamma());
  std::copy(beta.begin(), beta.end(), cpu.beta());
  cpu.executor.forward();
  cpu.executor.backward();
  const auto k = emulate_layer_norm(cpu.in, gamma.data(), beta.data(), cpu.d_out, rows, Features, 1e-3f, vec);
  INFO("features " << Features << (vec ? ", float4 layout" : ", scalar layout"));
  std::vector<float> mean(rows), rstd(rows);
  for (int r = 0; r < rows; ++r) mean[r] = cpu.stats()[2 * r], rstd[r] = cpu.stats()[2 * r + 1];
  check_near("mean", k.mean.data(), mean.data(), rows, 1e-6, 1e-6);
  check_near("rstd", k.rstd.data(), rstd.data(), rows, 0, 1e-5);
  check_near("y", k.y.data(), cpu.out.data(), cpu.count, 1e-5, 1e-5);
  check_near("dx", k.dx.data(), cpu.d_in.data(), cpu.count, 1e-5, 1e-4);
  check_near("dgamma", k.dgamma.data(), cpu.d_gamma(), Features, 1e-5, 1e-5);
  check_near("dbeta", k.dbeta.data(), cpu.d_beta(), Features, 1e-5, 1e-5);
}

// ---------------------------------------------------------------------------
// Cross-entropy as the kernels compute it (from probabilities: held rows).

void emulate_cross_entropy(const std::vector<float>& out, const std::vector<std::int32_t>& labels, int rows, int n,
                           int valid_rows, float gradient_scale, bool from_logits, bool vec, std::vector<float>& d_out,
                           std::vector<float>& row_loss) {
  const float scale = valid_rows > 0 ? gradient_scale / static_cast<float>(valid_rows) : 0.f;
  d_out.assign(out.size(), 0.f);
  row_loss.assign(rows, 0.f);
  const int group = group_for(n);
  for (int r = 0; r < valid_rows; ++r) {
    const float* z = out.data() + static_cast<std::size_t>(r) * n;
    float* g = d_out.data() + static_cast<std::size_t>(r) * n;
    const int y = labels[r];
    if (from_logits) {
      const float lse = rm::log_sum_exp(kernel_order(z, n, vec, rm::max_sum_empty(), rm::max_sum_push, rm::max_sum_merger{}));
      for (int j = 0; j < n; ++j) g[j] = rm::softmax_cross_entropy_gradient(z[j], lse, j == y, scale);
      row_loss[r] = rm::softmax_cross_entropy_loss(z[y], lse);
    } else {
      std::vector<rm::sum_pair> threads(group, rm::sum_pair{0.f, 0.f});
      for (int t = 0; t < group; ++t)
        for (int j : columns_of(t, group, n, vec)) {
          threads[t].first += z[j];
          if (j == y) threads[t].second = z[j];
        }
      const rm::sum_pair s = rm::group_reduce_reference(threads.data(), group, rm::sum_pair{0.f, 0.f}, rm::sum_pair_merger{});
      const rm::probability_loss loss = rm::sparse_probability_loss(s.second, s.first, scale);
      for (int j = 0; j < n; ++j) g[j] = j == y ? loss.shared - loss.label_extra : loss.shared;
      row_loss[r] = loss.loss;
    }
  }
}

}  // namespace

TEST_CASE("row_math: (max, sum) merges give the direct log-sum-exp in any split and order") {
  std::mt19937 rng(7);
  for (int n : kWidths) {
    CAPTURE(n);
    const auto v = uniform(n, -20.f, 20.f, 100 + n);
    const double want = direct_log_sum_exp(v);
    auto close = [&](rm::max_sum a) { return std::fabs(rm::log_sum_exp(a) - want) <= 1e-6 * (1 + std::fabs(want)); };
    CHECK(close(push_all(v, 0, v.size(), rm::max_sum_empty(), rm::max_sum_push)));
    for (int trial = 0; trial < 20; ++trial)
      CHECK(close(random_split_merge(v, rng, rm::max_sum_empty(), rm::max_sum_push, rm::max_sum_merge)));
    // One element per push, merged as singletons.
    rm::max_sum singles = rm::max_sum_empty();
    for (float z : v) singles = rm::max_sum_merge(singles, rm::max_sum_push(rm::max_sum_empty(), z));
    CHECK(close(singles));
    if (n <= 8192) {
      CHECK(close(kernel_order(v.data(), n, false, rm::max_sum_empty(), rm::max_sum_push, rm::max_sum_merger{})));
      if (n % 4 == 0)
        CHECK(close(kernel_order(v.data(), n, true, rm::max_sum_empty(), rm::max_sum_push, rm::max_sum_merger{})));
    }
    // The CPU loss's own log-sum-exp.
    CHECK(std::fabs(tf::losses::detail::log_sum_exp(v.data(), n) - want) <= 1e-6 * (1 + std::fabs(want)));
  }
}

TEST_CASE("row_math: (max, sum) with the empty row, -inf, +inf and NaN") {
  const rm::max_sum empty = rm::max_sum_empty();
  const rm::max_sum a = rm::max_sum_push(rm::max_sum_push(empty, 1.5f), -0.25f);
  // The empty side changes nothing, bit for bit, on either side.
  for (rm::max_sum m : {rm::max_sum_merge(a, empty), rm::max_sum_merge(empty, a)}) {
    CHECK(same_bits(m.max, a.max));
    CHECK(same_bits(m.sum, a.sum));
  }
  // -inf first (a masked logit) then finite values: no NaN, and it counts for nothing.
  const std::vector<float> masked{-INFINITY, 2.f, -INFINITY, 1.f};
  const rm::max_sum m = push_all(masked, 0, masked.size(), empty, rm::max_sum_push);
  CHECK(rm::log_sum_exp(m) == doctest::Approx(std::log(std::exp(2.0) + std::exp(1.0))));
  rm::max_sum masked_merge = rm::max_sum_merge(rm::max_sum_push(empty, -INFINITY), rm::max_sum_push(empty, 2.f));
  CHECK(masked_merge.max == 2.f);
  CHECK(masked_merge.sum == 1.f);
  // All -inf: lse is -inf (the CPU gives NaN gradients there too; the loss is undefined).
  CHECK(rm::log_sum_exp(push_all(std::vector<float>{-INFINITY, -INFINITY}, 0, 2, empty, rm::max_sum_push)) == -INFINITY);
  // NaN anywhere makes the result NaN, pushed or merged, first or later.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(rm::log_sum_exp(push_all(std::vector<float>{nan, 1.f}, 0, 2, empty, rm::max_sum_push))));
  CHECK(std::isnan(rm::log_sum_exp(push_all(std::vector<float>{1.f, nan, 3.f}, 0, 3, empty, rm::max_sum_push))));
  CHECK(std::isnan(rm::log_sum_exp(rm::max_sum_merge(a, rm::max_sum_push(empty, nan)))));
  CHECK(std::isnan(rm::log_sum_exp(rm::max_sum_merge(rm::max_sum_push(empty, nan), a))));
  // +inf dominates.
  CHECK(rm::log_sum_exp(rm::max_sum_push(a, INFINITY)) == INFINITY);
}

TEST_CASE("row_math: Welford pushes and Chan merges give the two-pass mean and M2 in any split") {
  std::mt19937 rng(9);
  for (int n : kWidths) {
    // An offset mean makes a one-pass sum of squares lose digits; these must not.
    for (float offset : {0.f, 1000.f}) {
      CAPTURE(offset);
      auto v = uniform(n, -2.f, 3.f, 200 + n);
      for (float& x : v) x += offset;
      check_mean_m2(push_all(v, 0, v.size(), rm::mean_m2_empty(), rm::mean_m2_push), v, "pushed");
      for (int trial = 0; trial < 20; ++trial)
        check_mean_m2(random_split_merge(v, rng, rm::mean_m2_empty(), rm::mean_m2_push, rm::mean_m2_merge), v,
                      "split and merged");
      check_mean_m2(kernel_order(v.data(), n, false, rm::mean_m2_empty(), rm::mean_m2_push, rm::mean_m2_merger{}), v,
                    "kernel order, scalar");
      if (n % 4 == 0)
        check_mean_m2(kernel_order(v.data(), n, true, rm::mean_m2_empty(), rm::mean_m2_push, rm::mean_m2_merger{}), v,
                      "kernel order, float4");
    }
  }
  const rm::mean_m2 s = rm::mean_m2_push(rm::mean_m2_push(rm::mean_m2_empty(), 3.f), 7.f);
  for (rm::mean_m2 m : {rm::mean_m2_merge(s, rm::mean_m2_empty()), rm::mean_m2_merge(rm::mean_m2_empty(), s)}) {
    CHECK(same_bits(m.count, s.count));
    CHECK(same_bits(m.mean, s.mean));
    CHECK(same_bits(m.m2, s.m2));
  }
  CHECK(s.mean == 5.f);
  CHECK(s.m2 == 8.f);
}

TEST_CASE("row_math: group_reduce_reference is the warp butterfly's tree, padded with empties") {
  // With exact integers every order agrees; what is checked is which values enter.
  std::vector<float> v(1024);
  for (int i = 0; i < 1024; ++i) v[i] = static_cast<float>(i);
  for (int threads : {32, 64, 128, 256, 512, 1024})
    CHECK(rm::group_reduce_reference(v.data(), threads, 0.f, rm::plus{}) ==
          static_cast<float>(threads * (threads - 1) / 2));
  // Not commutative in general: the lower half always comes first.
  auto first_wins = [](float a, float) { return a; };
  CHECK(rm::group_reduce_reference(v.data(), 32, -1.f, first_wins) == 0.f);
  CHECK(rm::group_reduce_reference(v.data(), 256, -1.f, first_wins) == 0.f);
  auto last_wins = [](float, float b) { return b; };
  CHECK(rm::group_reduce_reference(v.data(), 32, -1.f, last_wins) == 31.f);
  CHECK(rm::group_reduce_reference(v.data(), 256, -1.f, last_wins) == -1.f);  // the padding warps come last
}

TEST_CASE("row_math: the kernels' layer_norm arithmetic reproduces the CPU layer") {
  check_layer_norm_against_cpu<1>(false);
  check_layer_norm_against_cpu<3>(false);
  check_layer_norm_against_cpu<127>(false);
  check_layer_norm_against_cpu<4099>(false);
  for (bool vec : {false, true}) {
    check_layer_norm_against_cpu<64>(vec);
    check_layer_norm_against_cpu<768>(vec);
    check_layer_norm_against_cpu<1000>(vec);
  }
}

TEST_CASE("row_math: the kernels' cross-entropy arithmetic reproduces losses::sparse_categorical_crossentropy") {
  for (int n : {2, 3, 64, 127, 768, 1000, 4099})
    for (bool from_logits : {true, false})
      for (bool vec : {false, true}) {
        // Logits go by float4 over rows padded to a multiple of 4 (a GPU head's), probabilities not.
        if (vec && n % 4 != 0 && !from_logits) continue;
        CAPTURE(n);
        CAPTURE(from_logits);
        CAPTURE(vec);
        constexpr int rows = 9, valid = 7;
        const auto out = from_logits ? uniform(static_cast<std::size_t>(rows) * n, -6.f, 6.f, 300 + n)
                                     : uniform(static_cast<std::size_t>(rows) * n, 0.01f, 1.f, 300 + n);
        std::vector<std::int32_t> labels(rows);
        std::mt19937 rng(400 + n);
        for (auto& y : labels) y = std::uniform_int_distribution<int>(0, n - 1)(rng);
        std::vector<float> cpu_gradient(out.size()), cpu_loss(rows);
        tf::losses::sparse_categorical_crossentropy{.from_logits = from_logits}(out.data(), labels.data(), rows, n,
                                                                                 valid, cpu_gradient.data(),
                                                                                 cpu_loss.data());
        std::vector<float> gradient, loss;
        emulate_cross_entropy(out, labels, rows, n, valid, 1.f, from_logits, vec, gradient, loss);
        check_near("row loss", loss.data(), cpu_loss.data(), rows, 1e-5, 1e-5);
        check_near("gradient", gradient.data(), cpu_gradient.data(), out.size(), 4e-6 / valid, 1e-4);
        for (int r = valid; r < rows; ++r) CHECK(loss[r] == 0.f);
        // The gradient scale multiplies, exactly when it is a power of two.
        std::vector<float> scaled, scaled_loss;
        emulate_cross_entropy(out, labels, rows, n, valid, 1024.f, from_logits, vec, scaled, scaled_loss);
        for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(scaled[i] == 1024.f * gradient[i]);
        CHECK(std::memcmp(scaled_loss.data(), loss.data(), rows * sizeof(float)) == 0);
      }
}

TEST_CASE("row_math: over a GPU head's bf16 logits, the kernel's float arithmetic and its bf16 gradient") {
  // The kernel reads each bf16 logit into a float, runs the arithmetic
  // above, and rounds the gradient to bf16 as it stores it over the logits.
  for (int n : {64, 1000, 4099, 50257}) {
    CAPTURE(n);
    constexpr int rows = 5, valid = 4;
    const auto z = uniform(static_cast<std::size_t>(rows) * n, -8.f, 8.f, 500 + n);
    std::vector<float> stored(z.size());
    float most_rounded = 0;
    for (std::size_t i = 0; i < z.size(); ++i) {
      stored[i] = static_cast<float>(tf::bf16(z[i]));
      most_rounded = std::max(most_rounded, std::abs(stored[i] - z[i]));
    }
    std::vector<std::int32_t> labels(rows);
    std::mt19937 rng(600 + n);
    for (auto& y : labels) y = std::uniform_int_distribution<int>(0, n - 1)(rng);
    std::vector<float> gradient, loss;
    emulate_cross_entropy(stored, labels, rows, n, valid, 1.f, true, true, gradient, loss);  // padded rows: float4
    std::vector<float> cpu_gradient(z.size()), cpu_loss(rows), exact_gradient(z.size()), exact_loss(rows);
    const tf::losses::sparse_categorical_crossentropy xent{.from_logits = true};
    xent(stored.data(), labels.data(), rows, n, valid, cpu_gradient.data(), cpu_loss.data());
    xent(z.data(), labels.data(), rows, n, valid, exact_gradient.data(), exact_loss.data());
    check_near("row loss", loss.data(), cpu_loss.data(), rows, 1e-5, 1e-5);
    // Stored as bf16: within half a bf16 step (2^-9 relative) of the float gradient.
    for (std::size_t i = 0; i < z.size(); ++i) {
      const float kept = static_cast<float>(tf::bf16(gradient[i]));
      REQUIRE(std::abs(kept - cpu_gradient[i]) <= std::abs(cpu_gradient[i]) * 0x1p-8f + 1e-9f);
    }
    // Against float32 logits the row loss moves by at most twice the largest
    // rounding of a logit (its log-sum-exp and its label's logit each by at most one).
    for (int r = 0; r < valid; ++r) CHECK(std::abs(loss[r] - exact_loss[r]) <= 2 * most_rounded + 1e-5f);
  }
}

TEST_CASE("row_math: the probability clip as Keras's, and softmax as softmax_row") {
  // q = 0 and q = 1 clip: the loss is flat there, so no gradient.
  const rm::probability_loss low = rm::sparse_probability_loss(0.f, 1.f, 0.5f);
  CHECK(low.loss == doctest::Approx(-std::log(1e-7)).epsilon(1e-6));
  CHECK(low.shared == 0.f);
  CHECK(low.label_extra == 0.f);
  const rm::probability_loss high = rm::sparse_probability_loss(2.f, 2.f, 0.5f);
  CHECK(high.shared == 0.f);
  const rm::probability_loss inside = rm::sparse_probability_loss(0.25f, 2.f, 0.5f);
  CHECK(inside.loss == doctest::Approx(-std::log(0.125)));
  CHECK(inside.shared == 0.25f);
  CHECK(inside.label_extra == 2.f);
  CHECK(std::isnan(rm::sparse_probability_loss(std::numeric_limits<float>::quiet_NaN(), 1.f, 1.f).loss));

  for (int n : kWidths) {
    CAPTURE(n);
    const auto z = uniform(n, -10.f, 10.f, 500 + n);
    std::vector<float> cpu(n);
    tf::softmax_row(z.data(), cpu.data(), n);
    const rm::max_sum m = kernel_order(z.data(), n, false, rm::max_sum_empty(), rm::max_sum_push, rm::max_sum_merger{});
    std::vector<float> mine(n);
    for (int j = 0; j < n; ++j) mine[j] = rm::softmax_probability(z[j], m.max, 1.f / m.sum);
    check_near("softmax", mine.data(), cpu.data(), n, 1e-9, 5e-5);
  }
}
