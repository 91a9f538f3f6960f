// The layer_norm and softmax / cross-entropy kernels (backend/cuda/layer_norm.hpp,
// backend/cuda/softmax_cross_entropy.hpp) against double-precision references
// computed here on the host, over widths that take every path: a warp per row
// (1, 3, 64, 127), wider groups (768, 1000, 4099), streamed rows (9001, 12288,
// 50257), scalar and float4 access. Also padding rows, the gradient scale,
// in-place use, bitwise repeatability and out-of-range labels.
//
// Tolerances: float32 sums over at most ~12k elements in trees of depth ~14
// stay within ~1e-6 relative of double; the bounds below leave 5-10x over
// that, and a wrong term in any formula misses them by orders of magnitude.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "typeflow/backend/cuda/layer_norm.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/softmax_cross_entropy.hpp"

namespace cu = typeflow::backend::cuda;

namespace {

constexpr int kWidths[] = {1, 3, 64, 127, 768, 1000, 4099, 9001, 12288};
constexpr int kRows[] = {1, 5, 256};

// ---------------------------------------------------------------------------
// Device memory in and out.

template <class T>
cu::device_buffer upload(const std::vector<T>& host) {
  cu::device_buffer buffer(std::max<std::size_t>(1, host.size()) * sizeof(T));
  if (!host.empty())
    cu::copy_to_device(buffer.data(), host.data(), host.size() * sizeof(T));
  return buffer;
}

template <class T>
std::vector<T> download(const T* device, std::size_t count) {
  std::vector<T> host(count);
  if (count) TYPEFLOW_CUDA_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

std::vector<float> uniform(std::size_t count, float low, float high, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::int32_t> labels_for(int rows, int classes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, classes - 1);
  std::vector<std::int32_t> v(rows);
  for (auto& y : v) y = dist(rng);
  return v;
}

// |got - want| <= absolute + relative * |want| everywhere (NaN only where want is NaN).
void check_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                 double absolute, double relative) {
  REQUIRE(got.size() == want.size());
  std::size_t failures = 0, first = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool want_nan = std::isnan(want[i]);
    const double error = std::fabs(double{got[i]} - want[i]);
    const bool ok = want_nan ? std::isnan(got[i]) : (!std::isnan(got[i]) && error <= absolute + relative * std::fabs(want[i]));
    if (!want_nan && !std::isnan(got[i])) worst = std::max(worst, error / (absolute + relative * std::fabs(want[i])));
    if (!ok && failures++ == 0) first = i;
  }
  INFO(what << ": " << failures << " of " << got.size() << " outside tolerance; first at " << first << " (got "
            << (got.empty() ? 0.f : got[first]) << ", want " << (want.empty() ? 0. : want[first])
            << "); worst error / tolerance " << worst);
  CHECK(failures == 0);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------------------
// layer_norm.

struct layer_norm_data {
  int rows = 0, features = 0;
  std::vector<float> x, gamma, beta, dy;
};

layer_norm_data layer_norm_inputs(int rows, int features, std::uint32_t seed) {
  layer_norm_data d;
  d.rows = rows;
  d.features = features;
  const std::size_t count = static_cast<std::size_t>(rows) * features;
  d.x = uniform(count, -2.f, 3.f, seed);
  d.gamma = uniform(features, 0.5f, 1.5f, seed + 1);
  d.beta = uniform(features, -1.f, 1.f, seed + 2);
  d.dy = uniform(count, -1.f, 1.f, seed + 3);
  return d;
}

struct layer_norm_expected {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

// layers/layer_norm.hpp's formulas, all in double. gamma / beta empty: 1 / 0.
layer_norm_expected layer_norm_reference(const layer_norm_data& d, float epsilon, bool affine) {
  const int rows = d.rows, n = d.features;
  layer_norm_expected e;
  e.y.resize(d.x.size());
  e.dx.resize(d.x.size());
  e.mean.resize(rows);
  e.rstd.resize(rows);
  e.dgamma.assign(n, 0.0);
  e.dbeta.assign(n, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* x = d.x.data() + static_cast<std::size_t>(r) * n;
    const float* dy = d.dy.data() + static_cast<std::size_t>(r) * n;
    double sum = 0;
    for (int j = 0; j < n; ++j) sum += x[j];
    const double mean = sum / n;
    double squares = 0;
    for (int j = 0; j < n; ++j) squares += (x[j] - mean) * (x[j] - mean);
    const double rstd = 1.0 / std::sqrt(squares / n + double{epsilon});
    e.mean[r] = mean;
    e.rstd[r] = rstd;
    double sum_g = 0, sum_g_xhat = 0;
    for (int j = 0; j < n; ++j) {
      const double xhat = (x[j] - mean) * rstd;
      const double gamma = affine ? d.gamma[j] : 1.0, beta = affine ? d.beta[j] : 0.0;
      e.y[static_cast<std::size_t>(r) * n + j] = gamma * xhat + beta;
      const double g = dy[j] * gamma;
      sum_g += g;
      sum_g_xhat += g * xhat;
      e.dgamma[j] += dy[j] * xhat;
      e.dbeta[j] += dy[j];
    }
    for (int j = 0; j < n; ++j) {
      const double xhat = (x[j] - mean) * rstd;
      const double g = dy[j] * (affine ? d.gamma[j] : 1.0);
      e.dx[static_cast<std::size_t>(r) * n + j] = rstd * (g - sum_g / n - xhat * sum_g_xhat / n);
    }
  }
  return e;
}

struct layer_norm_result {
  std::vector<float> y, mean, rstd, dx, dgamma, dbeta;
};

struct layer_norm_options {
  bool affine = true;    // pass gamma and beta (else null)
  bool in_place = false;  // y over x, dx over dy
  int offset = 0;         // floats by which every row pointer is shifted (misaligned when not a multiple of 4)
};

// One forward and backward on a stream; dgamma / dbeta start as a sentinel so
// that "written, not accumulated" shows.
layer_norm_result run_layer_norm(const layer_norm_data& d, float epsilon, layer_norm_options o = {}) {
  const int rows = d.rows, n = d.features;
  const std::size_t count = static_cast<std::size_t>(rows) * n;
  cu::stream s;
  auto padded = [&](const std::vector<float>& v) {
    std::vector<float> p(v.size() + o.offset, 0.f);
    std::copy(v.begin(), v.end(), p.begin() + o.offset);
    return p;
  };
  cu::device_buffer x = upload(padded(d.x)), dy = upload(padded(d.dy));
  cu::device_buffer gamma = upload(padded(d.gamma)), beta = upload(padded(d.beta));
  cu::device_buffer y_own(sizeof(float) * (count + o.offset + 1)), dx_own(sizeof(float) * (count + o.offset + 1));
  cu::device_buffer mean(sizeof(float) * rows + 4), rstd(sizeof(float) * rows + 4);
  cu::device_buffer dgamma = upload(std::vector<float>(n, 12345.f)), dbeta = upload(std::vector<float>(n, 12345.f));
  cu::device_buffer workspace(std::max<std::size_t>(4, cu::layer_norm_backward_workspace_bytes(rows, n)));

  float* xp = x.data<float>() + o.offset;
  float* dyp = dy.data<float>() + o.offset;
  float* yp = o.in_place ? xp : y_own.data<float>() + o.offset;
  float* dxp = o.in_place ? dyp : dx_own.data<float>() + o.offset;
  const float* gp = o.affine ? gamma.data<float>() + o.offset : nullptr;
  const float* bp = o.affine ? beta.data<float>() + o.offset : nullptr;

  layer_norm_result out;
  // In place, forward overwrites x, which backward needs: keep a copy of x for it.
  cu::device_buffer x_copy = upload(padded(d.x));
  const float* x_for_backward = o.in_place ? x_copy.data<float>() + o.offset : xp;
  cu::layer_norm_forward(xp, gp, bp, yp, mean.data<float>(), rstd.data<float>(), rows, n, epsilon, s.get());
  cu::layer_norm_backward(x_for_backward, gp, mean.data<float>(), rstd.data<float>(), dyp, dxp, dgamma.data<float>(),
                          dbeta.data<float>(), rows, n, s.get(), workspace.data<float>());
  s.synchronize();
  out.y = download(yp, count);
  out.dx = download(dxp, count);
  out.mean = download(mean.data<float>(), rows);
  out.rstd = download(rstd.data<float>(), rows);
  out.dgamma = download(dgamma.data<float>(), n);
  out.dbeta = download(dbeta.data<float>(), n);
  return out;
}

void check_layer_norm(const layer_norm_result& got, const layer_norm_expected& want, const layer_norm_data& d) {
  check_close("y", got.y, want.y, 2e-5, 2e-5);
  check_close("mean", got.mean, want.mean, 5e-6, 2e-6);
  check_close("rstd", got.rstd, want.rstd, 0, 2e-5);
  check_close("dx", got.dx, want.dx, 3e-5, 1e-4);
  // Column sums over up to 256 rows of terms of size ~1.
  const double rows = d.rows;
  check_close("dgamma", got.dgamma, want.dgamma, 1e-6 * rows, 1e-5);
  check_close("dbeta", got.dbeta, want.dbeta, 1e-6 * rows, 1e-5);
}

// ---------------------------------------------------------------------------
// Cross-entropy.

struct xent_expected {
  std::vector<double> loss, gradient;
};

// losses.hpp's sparse_categorical_crossentropy in double; scale as the kernels take it.
xent_expected xent_reference(const std::vector<float>& out, const std::vector<std::int32_t>& labels, int rows,
                             int classes, int valid_rows, float gradient_scale, bool from_logits) {
  const double scale = valid_rows > 0 ? double{gradient_scale / static_cast<float>(valid_rows)} : 0.0;
  xent_expected e;
  e.loss.assign(rows, 0.0);
  e.gradient.assign(static_cast<std::size_t>(rows) * classes, 0.0);
  for (int r = 0; r < valid_rows; ++r) {
    const float* z = out.data() + static_cast<std::size_t>(r) * classes;
    double* g = e.gradient.data() + static_cast<std::size_t>(r) * classes;
    const int y = labels[r];
    if (y < 0 || y >= classes) {
      e.loss[r] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    if (from_logits) {
      double max = -INFINITY;
      for (int j = 0; j < classes; ++j) max = std::max(max, double{z[j]});
      double sum = 0;
      for (int j = 0; j < classes; ++j) sum += std::exp(z[j] - max);
      const double lse = max + std::log(sum);
      e.loss[r] = lse - z[y];
      for (int j = 0; j < classes; ++j) g[j] = (std::exp(z[j] - lse) - (j == y ? 1.0 : 0.0)) * scale;
    } else {
      double sum = 0;
      for (int j = 0; j < classes; ++j) sum += z[j];
      const double q = z[y] / sum;
      const double lo = 1e-7f, hi = 1.f - 1e-7f;
      const double clipped = std::clamp(q, lo, hi);
      e.loss[r] = -std::log(clipped);
      if (q == clipped) {
        for (int j = 0; j < classes; ++j) g[j] = scale / sum;
        g[y] -= scale / z[y];
      }
    }
  }
  return e;
}

struct xent_result {
  std::vector<float> loss, gradient;
  int bad_labels = 0;
};

xent_result run_xent(const std::vector<float>& out, const std::vector<std::int32_t>& labels, int rows, int classes,
                     int valid_rows, float gradient_scale, bool from_logits, bool in_place = false) {
  cu::stream s;
  cu::device_buffer z = upload(out), y = upload(labels);
  cu::device_buffer gradient_own(sizeof(float) * std::max<std::size_t>(1, out.size()));
  cu::device_buffer loss = upload(std::vector<float>(rows, 777.f));
  cu::device_buffer flag(sizeof(int));
  TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(flag.data(), 0, sizeof(int), s.get()));
  float* g = in_place ? z.data<float>() : gradient_own.data<float>();
  cu::sparse_categorical_crossentropy(from_logits, z.data<float>(), y.data<std::int32_t>(), g, loss.data<float>(), rows,
                                      classes, valid_rows, gradient_scale, s.get(), flag.data<int>());
  s.synchronize();
  xent_result r;
  r.loss = download(loss.data<float>(), rows);
  r.gradient = download(g, out.size());
  r.bad_labels = download(flag.data<int>(), 1)[0];
  return r;
}

// Gradients compared in units of the per-row scale.
void check_xent(const xent_result& got, const xent_expected& want, double scale) {
  check_close("row loss", got.loss, want.loss, 2e-5, 2e-5);
  check_close("gradient", got.gradient, want.gradient, 5e-6 * scale, 5e-5);
}

std::vector<float> logits_for(int rows, int classes, std::uint32_t seed) { return uniform(static_cast<std::size_t>(rows) * classes, -6.f, 6.f, seed); }
std::vector<float> probabilities_for(int rows, int classes, std::uint32_t seed) {
  return uniform(static_cast<std::size_t>(rows) * classes, 0.01f, 1.f, seed);  // not normalised: the loss divides by the sum
}

}  // namespace

// ---------------------------------------------------------------------------

TEST_CASE("layer_norm kernels: forward and backward match double precision over every path") {
  for (int features : kWidths)
    for (int rows : kRows) {
      CAPTURE(rows);
      CAPTURE(features);
      const auto d = layer_norm_inputs(rows, features, 1000u + static_cast<std::uint32_t>(rows * 31 + features));
      check_layer_norm(run_layer_norm(d, 1e-3f), layer_norm_reference(d, 1e-3f, true), d);
    }
}

TEST_CASE("layer_norm kernels: in place (y over x, dx over dy), without gamma and beta, and misaligned rows") {
  for (int features : {3, 64, 768, 4099, 12288})
    for (int rows : {5, 256}) {
      CAPTURE(rows);
      CAPTURE(features);
      const auto d = layer_norm_inputs(rows, features, 2000u + static_cast<std::uint32_t>(rows * 31 + features));
      const auto want = layer_norm_reference(d, 1e-5f, true);
      {
        INFO("in place");
        check_layer_norm(run_layer_norm(d, 1e-5f, {.in_place = true}), want, d);
      }
      {
        INFO("no gamma, no beta");
        check_layer_norm(run_layer_norm(d, 1e-5f, {.affine = false}), layer_norm_reference(d, 1e-5f, false), d);
      }
      {
        INFO("rows off 16-byte alignment take the scalar path");
        check_layer_norm(run_layer_norm(d, 1e-5f, {.offset = 1}), want, d);
      }
    }
}

TEST_CASE("layer_norm kernels: two runs are bitwise identical") {
  for (int features : {127, 768, 4099, 12288}) {
    CAPTURE(features);
    const auto d = layer_norm_inputs(256, features, 3000u + static_cast<std::uint32_t>(features));
    const auto a = run_layer_norm(d, 1e-3f), b = run_layer_norm(d, 1e-3f);
    CHECK(bitwise_equal(a.y, b.y));
    CHECK(bitwise_equal(a.mean, b.mean));
    CHECK(bitwise_equal(a.rstd, b.rstd));
    CHECK(bitwise_equal(a.dx, b.dx));
    CHECK(bitwise_equal(a.dgamma, b.dgamma));
    CHECK(bitwise_equal(a.dbeta, b.dbeta));
  }
}

TEST_CASE("layer_norm kernels: the workspace is a function of the shape; no rows gives zero parameter gradients") {
  CHECK(cu::layer_norm_backward_workspace_bytes(0, 768) == 0);
  CHECK(cu::layer_norm_backward_workspace_bytes(1, 768) >= 2 * 768 * sizeof(float));
  CHECK(cu::layer_norm_backward_workspace_bytes(8192, 768) == cu::layer_norm_backward_workspace_bytes(8192, 768));
  // Bounded for very many rows (parts are capped).
  CHECK(cu::layer_norm_backward_workspace_bytes(1 << 22, 768) <= std::size_t{2} * 4096 * 768 * sizeof(float));
  CHECK(cu::layer_norm_backward_workspace_bytes(1 << 22, 20000) <= std::size_t{2} * 1024 * 20000 * sizeof(float));

  cu::stream s;
  cu::device_buffer dgamma = upload(std::vector<float>(7, 5.f)), dbeta = upload(std::vector<float>(7, 5.f));
  cu::layer_norm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dgamma.data<float>(),
                          dbeta.data<float>(), 0, 7, s.get(), nullptr);
  s.synchronize();
  for (float v : download(dgamma.data<float>(), 7)) CHECK(v == 0.f);
  for (float v : download(dbeta.data<float>(), 7)) CHECK(v == 0.f);
  CHECK_THROWS_AS(cu::layer_norm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 1e-3f, s.get()),
                  std::invalid_argument);
}

TEST_CASE("layer_norm kernels: only dx, or only the parameter gradients") {
  const auto d = layer_norm_inputs(64, 1000, 4242);
  const auto want = layer_norm_reference(d, 1e-3f, true);
  const int rows = d.rows, n = d.features;
  cu::stream s;
  cu::device_buffer x = upload(d.x), dy = upload(d.dy), gamma = upload(d.gamma), beta = upload(d.beta);
  cu::device_buffer y(sizeof(float) * d.x.size()), dx(sizeof(float) * d.x.size());
  cu::device_buffer mean(sizeof(float) * rows), rstd(sizeof(float) * rows);
  cu::device_buffer dgamma(sizeof(float) * n), dbeta(sizeof(float) * n);
  cu::device_buffer workspace(cu::layer_norm_backward_workspace_bytes(rows, n));
  cu::layer_norm_forward(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(), mean.data<float>(),
                         rstd.data<float>(), rows, n, 1e-3f, s.get());
  // dx alone needs no workspace.
  cu::layer_norm_backward(x.data<float>(), gamma.data<float>(), mean.data<float>(), rstd.data<float>(),
                          dy.data<float>(), dx.data<float>(), nullptr, nullptr, rows, n, s.get(), nullptr);
  s.synchronize();
  check_close("dx alone", download(dx.data<float>(), d.x.size()), want.dx, 3e-5, 1e-4);
  cu::layer_norm_backward(x.data<float>(), gamma.data<float>(), mean.data<float>(), rstd.data<float>(),
                          dy.data<float>(), nullptr, dgamma.data<float>(), dbeta.data<float>(), rows, n, s.get(),
                          workspace.data<float>());
  s.synchronize();
  check_close("dgamma alone", download(dgamma.data<float>(), n), want.dgamma, 1e-6 * rows, 1e-5);
  check_close("dbeta alone", download(dbeta.data<float>(), n), want.dbeta, 1e-6 * rows, 1e-5);
}

TEST_CASE("softmax cross-entropy kernels: from logits and from probabilities match double precision") {
  for (int classes : {1, 3, 64, 127, 768, 1000, 4099, 9001, 12288, 50257})
    for (int rows : kRows)
      for (bool from_logits : {true, false}) {
        CAPTURE(rows);
        CAPTURE(classes);
        CAPTURE(from_logits);
        const std::uint32_t seed = 5000u + static_cast<std::uint32_t>(rows * 31 + classes);
        const auto out = from_logits ? logits_for(rows, classes, seed) : probabilities_for(rows, classes, seed);
        const auto labels = labels_for(rows, classes, seed + 1);
        // All rows valid with scale 1; then the last ~quarter padding with a loss scale of 1024.
        const int padded_valid = rows - rows / 4;
        for (auto [valid, scale] : {std::pair{rows, 1.f}, std::pair{padded_valid, 1024.f}}) {
          CAPTURE(valid);
          CAPTURE(scale);
          const auto got = run_xent(out, labels, rows, classes, valid, scale, from_logits);
          check_xent(got, xent_reference(out, labels, rows, classes, valid, scale, from_logits),
                     double{scale / static_cast<float>(valid)});
          CHECK(got.bad_labels == 0);
          for (int r = valid; r < rows; ++r) REQUIRE(got.loss[r] == 0.f);  // padding: exact zeros
        }
      }
}

// A GPU's tied_logits head stores its rows padded (layers/embedding.hpp):
// the kernels read and write the first `classes` columns of rows
// `row_stride` apart, never the padding (NaN in the input, a sentinel in the
// gradient that must survive), whichever path the width takes.
TEST_CASE("softmax cross-entropy kernels: rows row_stride apart leave their padding alone") {
  constexpr float sentinel = 321.f;
  for (auto [classes, stride] : {std::pair{50, 64}, std::pair{1000, 1024}, std::pair{50257, 50304}})
    for (bool from_logits : {true, false}) {
      CAPTURE(classes);
      CAPTURE(from_logits);
      const int rows = classes > 10000 ? 6 : 37, valid = rows - 2;
      const std::uint32_t seed = 7000u + static_cast<std::uint32_t>(classes);
      const auto packed = from_logits ? logits_for(rows, classes, seed) : probabilities_for(rows, classes, seed);
      const auto labels = labels_for(rows, classes, seed + 1);
      std::vector<float> padded(static_cast<std::size_t>(rows) * stride, std::numeric_limits<float>::quiet_NaN());
      std::vector<float> gradient(padded.size(), sentinel);
      for (int r = 0; r < rows; ++r)
        std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(r) * classes, classes,
                    padded.begin() + static_cast<std::ptrdiff_t>(r) * stride);
      cu::stream s;
      cu::device_buffer z = upload(padded), y = upload(labels), g = upload(gradient), loss(sizeof(float) * rows);
      cu::sparse_categorical_crossentropy(from_logits, z.data<float>(), y.data<std::int32_t>(), g.data<float>(),
                                          loss.data<float>(), rows, classes, valid, 1.f, s.get(), nullptr, stride);
      s.synchronize();
      const auto got_gradient = download(g.data<float>(), padded.size());
      xent_result got;
      got.loss = download(loss.data<float>(), rows);
      for (int r = 0; r < rows; ++r) {
        const auto row = got_gradient.begin() + static_cast<std::ptrdiff_t>(r) * stride;
        got.gradient.insert(got.gradient.end(), row, row + classes);
        for (int j = classes; j < stride; ++j) REQUIRE(row[j] == sentinel);
      }
      check_xent(got, xent_reference(packed, labels, rows, classes, valid, 1.f, from_logits),
                 1.0 / static_cast<double>(valid));
    }
}

TEST_CASE("softmax cross-entropy kernels: out-of-range labels are flagged, never read, and zero their rows") {
  for (int classes : {64, 1000, 50257})
    for (bool from_logits : {true, false}) {
      CAPTURE(classes);
      CAPTURE(from_logits);
      constexpr int rows = 7, valid = 6;
      const auto out = from_logits ? logits_for(rows, classes, 77) : probabilities_for(rows, classes, 77);
      auto labels = labels_for(rows, classes, 78);
      labels[1] = -1;
      labels[4] = classes;
      labels[6] = 1 << 30;  // padding row: never read, so not counted
      const auto got = run_xent(out, labels, rows, classes, valid, 1.f, from_logits);
      CHECK(got.bad_labels == 2);
      const auto want = xent_reference(out, labels, rows, classes, valid, 1.f, from_logits);
      check_xent(got, want, 1.0 / valid);
      CHECK(std::isnan(got.loss[1]));
      CHECK(std::isnan(got.loss[4]));
      CHECK(got.loss[6] == 0.f);
      for (int r : {1, 4, 6})
        for (int j = 0; j < classes; ++j) REQUIRE(got.gradient[static_cast<std::size_t>(r) * classes + j] == 0.f);
    }
}

TEST_CASE("softmax cross-entropy kernels: in place, repeatable bit for bit, and -inf logits") {
  for (int classes : {127, 1000, 50257})
    for (bool from_logits : {true, false}) {
      CAPTURE(classes);
      CAPTURE(from_logits);
      constexpr int rows = 37;
      const auto out = from_logits ? logits_for(rows, classes, 91) : probabilities_for(rows, classes, 91);
      const auto labels = labels_for(rows, classes, 92);
      const auto a = run_xent(out, labels, rows, classes, 30, 8.f, from_logits);
      const auto b = run_xent(out, labels, rows, classes, 30, 8.f, from_logits);
      CHECK(bitwise_equal(a.loss, b.loss));
      CHECK(bitwise_equal(a.gradient, b.gradient));
      const auto c = run_xent(out, labels, rows, classes, 30, 8.f, from_logits, /*in_place=*/true);
      CHECK(bitwise_equal(a.loss, c.loss));
      CHECK(bitwise_equal(a.gradient, c.gradient));
    }
  // Masked logits: -inf entries (first among them) contribute nothing and get zero gradient.
  for (int classes : {5, 1000, 9001}) {
    CAPTURE(classes);
    auto out = logits_for(2, classes, 93);
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < classes; j += 2) out[static_cast<std::size_t>(r) * classes + j] = -INFINITY;
    const std::vector<std::int32_t> labels{1, (classes - 1) % 2 == 1 ? classes - 1 : classes - 2};  // odd: finite
    const auto got = run_xent(out, labels, 2, classes, 2, 1.f, true);
    const auto want = xent_reference(out, labels, 2, classes, 2, 1.f, true);
    check_xent(got, want, 0.5);
    for (int r = 0; r < 2; ++r)
      for (int j = 0; j < classes; j += 2) REQUIRE(got.gradient[static_cast<std::size_t>(r) * classes + j] == 0.f);
  }
}

TEST_CASE("softmax cross-entropy kernels: the probability clip zeroes the gradient as Keras's does") {
  constexpr int classes = 8;
  std::vector<float> p(2 * classes, 0.125f);
  p[3] = 0.f;                        // row 0, label 3: q = 0 clips to 1e-7
  for (int j = 0; j < classes; ++j)  // row 1: all mass on the label, q = 1 clips to 1 - 1e-7
    p[classes + j] = j == 5 ? 1.f : 0.f;
  const std::vector<std::int32_t> labels{3, 5};
  const auto got = run_xent(p, labels, 2, classes, 2, 1.f, false);
  const double clipped_low = -std::log(double{1e-7f}), clipped_high = -std::log(double{1.f - 1e-7f});
  CHECK(std::fabs(got.loss[0] - clipped_low) <= 1e-5 * clipped_low);
  CHECK(std::fabs(got.loss[1] - clipped_high) <= 1e-3 * clipped_high);
  for (float g : got.gradient) CHECK(g == 0.f);
}

TEST_CASE("softmax kernel: rows of probabilities match double precision") {
  for (int classes : {1, 3, 127, 1000, 4099, 12288, 50257})
    for (int rows : {1, 5, 64}) {
      CAPTURE(rows);
      CAPTURE(classes);
      const auto z = logits_for(rows, classes, 600u + static_cast<std::uint32_t>(classes));
      std::vector<double> want(z.size());
      for (int r = 0; r < rows; ++r) {
        const float* row = z.data() + static_cast<std::size_t>(r) * classes;
        double max = -INFINITY, sum = 0;
        for (int j = 0; j < classes; ++j) max = std::max(max, double{row[j]});
        for (int j = 0; j < classes; ++j) sum += std::exp(row[j] - max);
        for (int j = 0; j < classes; ++j) want[static_cast<std::size_t>(r) * classes + j] = std::exp(row[j] - max) / sum;
      }
      cu::stream s;
      cu::device_buffer in = upload(z), out(sizeof(float) * z.size());
      cu::softmax_forward(in.data<float>(), out.data<float>(), rows, classes, s.get());
      s.synchronize();
      check_close("softmax", download(out.data<float>(), z.size()), want, 1e-9, 1e-5);
      cu::softmax_forward(in.data<float>(), in.data<float>(), rows, classes, s.get());  // in place
      s.synchronize();
      CHECK(bitwise_equal(download(in.data<float>(), z.size()), download(out.data<float>(), z.size())));
    }
}

TEST_CASE("mean_of: a deterministic mean on the device, 0 for no values") {
  cu::stream s;
  cu::device_buffer result(sizeof(float));
  for (int n : {0, 1, 5, 1023, 1025, 100003}) {
    CAPTURE(n);
    const auto v = uniform(n, 0.f, 10.f, 4000u + static_cast<std::uint32_t>(n));
    double sum = 0;
    for (float x : v) sum += x;
    const double want = n > 0 ? sum / n : 0.0;
    cu::device_buffer values = upload(v);
    cu::mean_of(values.data<float>(), n, result.data<float>(), s.get());
    s.synchronize();
    const float first = download(result.data<float>(), 1)[0];
    CHECK(first == doctest::Approx(want).epsilon(1e-6));
    cu::mean_of(values.data<float>(), n, result.data<float>(), s.get());
    s.synchronize();
    const float second = download(result.data<float>(), 1)[0];
    CHECK(std::memcmp(&first, &second, sizeof(float)) == 0);
  }
}

TEST_CASE("softmax cross-entropy kernels: a captured graph replays the loss and its mean") {
  constexpr int rows = 256, classes = 1000, valid = 200;
  const auto z = logits_for(rows, classes, 31337);
  const auto labels = labels_for(rows, classes, 31338);
  cu::stream s;
  cu::device_buffer in = upload(z), y = upload(labels), g(sizeof(float) * z.size()), loss(sizeof(float) * rows),
      mean(sizeof(float));
  cu::graph graph;
  graph.capture(s.get(), [&](cudaStream_t cs) {
    cu::sparse_softmax_cross_entropy(in.data<float>(), y.data<std::int32_t>(), g.data<float>(), loss.data<float>(),
                                     rows, classes, valid, 1.f, cs);
    cu::mean_of(loss.data<float>(), valid, mean.data<float>(), cs);
  });
  graph.launch(s.get());
  s.synchronize();
  const auto want = xent_reference(z, labels, rows, classes, valid, 1.f, true);
  double sum = 0;
  for (int r = 0; r < valid; ++r) sum += want.loss[r];
  CHECK(download(mean.data<float>(), 1)[0] == doctest::Approx(sum / valid).epsilon(1e-5));
  check_close("gradient", download(g.data<float>(), z.size()), want.gradient, 5e-6 / valid, 5e-5);
}
