// causal_self_attention on the CPU (the layer: layers/attention.hpp).
//
// The two projections are oneDNN matmuls over all B*T rows, as dense's (16-bit
// products under a 16-bit policy: bf16 primitives where the CPU has them). The
// per-head products run in a loop over (sample, head) split over the cores,
// each head on its own: its k and v are packed into panels of 16 columns, and
// its rows go through the products 6 at a time with a register-blocked kernel
// (AVX2: 6 x 16 columns; AVX-512: 6 x 32, two panels at once), so that a row block of scores is softmaxed and
// multiplied by v while it is still in L1, and the masked upper triangle is
// skipped (no product reads or computes it). The alternative, batched oneDNN
// matmuls over strided (B, H, T, hd) views of qkv (gemm:jit, the only
// non-reference implementation oneDNN 2.6 has for them on AVX2), computes the
// full square and leaves the softmax to separate passes over (B, H, T, T) in
// memory: its two forward products alone took 46 ms at D=384, H=6, T=256,
// batch 64 on 2 cores, against about 30 ms for this whole per-head forward,
// softmax included, and about as long as it at D=128, H=4, T=64, batch 12
// (0.18 ms; bench/attention_bench.cpp).
//
// The workspace and scratch are laid out by the bound layer's facts
// (layers/attention.hpp, "Memory."). Only the lower triangle of P and d_S,
// plus a band of zeros up to 5 columns past the diagonal, is ever written or
// read.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "typeflow/backend/cpu/attention_bf16_kernels.hpp"
#include "typeflow/backend/cpu/attention_kernels.hpp"
#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/backend/cpu/lora.hpp"
#include "typeflow/backend/cpu/matmul.hpp"
#include "typeflow/core/parallel.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/layers/attention.hpp"
#include "typeflow/layers/dropout_mask.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

template <int Heads, class... Options, class Layer, int Batch>
class executor<causal_self_attention<Heads, Options...>, Layer, Batch, cpu> {
  using params = typename Layer::params;
  static constexpr float dropout_rate = causal_self_attention<Heads, Options...>::dropout_rate;
  static constexpr bool decoding = Layer::decoding;
  static constexpr bool with_dropout = Layer::with_dropout;
  static constexpr std::size_t keys = Layer::keys;
  static constexpr std::size_t score_stride = Layer::score_stride;
  static constexpr std::size_t pack_floats = Layer::pack_floats;
  static constexpr std::size_t qkv_bytes = Layer::qkv_bytes;
  static constexpr std::size_t probability_bytes = Layer::probability_bytes;
  static constexpr std::size_t concat_bytes = Layer::concat_bytes;
  static constexpr int head_slots = Layer::head_slots;
  static constexpr std::size_t bias_share_bytes = Layer::bias_share_bytes;
  static constexpr std::size_t slot_scores_floats = Layer::slot_scores_floats;
  static constexpr std::size_t slot_bytes = Layer::slot_bytes;
  static constexpr std::size_t cache_floats = Layer::cache_floats;
  static constexpr std::size_t decode_qkv_bytes = Layer::decode_qkv_bytes;
  static constexpr std::size_t decode_concat_bytes = Layer::decode_concat_bytes;
  static_assert(Layer::panel_width == detail::attention_kernels::panel_width &&
                    Layer::panel_width == detail::attention_kernels::pair_panel_width &&
                    Layer::row_block == detail::attention_kernels::tile_rows,
                "layers/attention.hpp sizes the packed panels and row blocks as the kernels here use them");
  static constexpr int T = Layer::steps, D = Layer::width, H = Layer::heads, hd = Layer::head_width;
  static constexpr int rows = decoding ? Batch : Batch * T;
  static constexpr int qkv_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr int proj_stride = static_cast<int>(std::tuple_element_t<2, typename params::tuple>::row_stride);
  // lora<>: both kernels frozen; an adapter on each projection.
  static constexpr bool with_lora = Layer::with_lora;
  template <std::size_t P>
  static constexpr int row_stride = [] {
    if constexpr (P < params::count) return static_cast<int>(std::tuple_element_t<P, typename params::tuple>::row_stride);
    else return 0;
  }();
  static constexpr std::ptrdiff_t ldp = static_cast<std::ptrdiff_t>(score_stride);
  static constexpr std::ptrdiff_t head_scores = static_cast<std::ptrdiff_t>(T) * ldp;  // one head's P
  static constexpr int band = detail::attention_kernels::tile_rows;
  static constexpr int pair_count = Batch * H;
  // Below this many multiply-adds the heads run on the calling thread.
  static constexpr bool parallel_heads =
      pair_count > 1 && std::size_t{Batch} * H * T * keys * hd >= std::size_t{1} << 16;

 public:
  explicit executor(const layer_io<cpu>& io)
      : io_(io), scale(static_cast<float>(1.0 / std::sqrt(double{hd}))),
        native_(native_possible && io.context->native_bf16),
        native_heads_(native_ && detail::attention_kernels::bf16_kernels) {
    auto& ctx = *io.context;
    const backend::cpu::gemm_storage storage{native_, false};
    const auto none = epilogue::none;
    qkv_forward_ = backend::cpu::matmul(ctx, {rows, 3 * D, D, false, false, 0, qkv_stride}, true, none, false, 1.f, storage);
    proj_forward_ = backend::cpu::matmul(ctx, {rows, D, D, false, false, 0, proj_stride}, true, none, false, 1.f, storage);
    if constexpr (!decoding) {
      // d_proj.kernel (D, D) = y^T · d_out; d_y = d_out · proj.kernel^T
      if constexpr (!with_lora)
        proj_kernel_grad_ =
            backend::cpu::matmul(ctx, {D, D, rows, true, false, 0, 0, proj_stride}, false, none, false, 1.f, storage);
      proj_input_grad_ =
          backend::cpu::matmul(ctx, {rows, D, D, false, true, 0, proj_stride}, false, none, false, 1.f, storage);
      // d_qkv.kernel (D, 3D) = x^T · d_qkv; d_x = d_qkv · qkv.kernel^T
      if constexpr (!with_lora)
        qkv_kernel_grad_ =
            backend::cpu::matmul(ctx, {D, 3 * D, rows, true, false, 0, 0, qkv_stride}, false, none, false, 1.f, storage);
      if (io.d_in)
        qkv_input_grad_ =
            backend::cpu::matmul(ctx, {rows, D, 3 * D, false, true, 0, qkv_stride}, false, none, false, 1.f, storage);
    }
    if constexpr (with_lora) {
      constexpr float s = Layer::lora_type::scale;
      constexpr int r = Layer::lora_rank;
      qkv_adapter_ = backend::cpu::lora_adapter(ctx, {rows, D, 3 * D, r, s, row_stride<4>, row_stride<5>, 0, 0},
                                                !decoding, io.d_in != nullptr);
      proj_adapter_ = backend::cpu::lora_adapter(ctx, {rows, D, D, r, s, row_stride<6>, row_stride<7>, 0, 0},
                                                 !decoding, true);
    }
    if constexpr (native_possible)
      if (native_) {  // the kernels' bf16 copies, kept from step to step too (precision/weight_copies.hpp)
        auto& copies = ctx.weight_copies;
        qkv_kernel_copy_ = copies.add(param_data<params, 0>(io), kept_bf16(qkv_kernel_kept_at),
                                      Layer::qkv_kernel_floats, io.workspace_persists);
        proj_kernel_copy_ = copies.add(param_data<params, 2>(io), kept_bf16(proj_kernel_kept_at),
                                       Layer::proj_kernel_floats, io.workspace_persists);
      }
  }

  std::size_t scratchpad_bytes() const {
    return std::max({qkv_forward_.scratchpad_bytes(), proj_forward_.scratchpad_bytes(),
                     proj_kernel_grad_.scratchpad_bytes(), proj_input_grad_.scratchpad_bytes(),
                     qkv_kernel_grad_.scratchpad_bytes(), qkv_input_grad_.scratchpad_bytes(),
                     qkv_adapter_.scratchpad_bytes(), proj_adapter_.scratchpad_bytes()});
  }

  // Whether the per-head products run as bf16 kernels (AVX512-BF16).
  bool native_heads() const { return native_heads_; }

  // The oneDNN implementations of the projections' matmuls, for reports.
  std::string implementations() const {
    std::string out = std::string("qkv ") + qkv_forward_.implementation() + ", proj " + proj_forward_.implementation();
    if constexpr (!decoding && !with_lora)
      out += std::string(", backward ") + proj_kernel_grad_.implementation() + " / " +
             proj_input_grad_.implementation() + " / " + qkv_kernel_grad_.implementation() +
             (io_.d_in ? std::string(" / ") + qkv_input_grad_.implementation() : std::string());
    return out;
  }

  void bind(std::byte* scratchpad) {
    // The projections' operands: the layer's own, or their 16-bit copies.
    const void* x = io_.in;
    const void* y = concat();
    const void* d_out = io_.d_out;
    const void* d_qkv_operand = d_qkv();
    const void* qkv_kernel = param_data<params, 0>(io_);
    const float* qkv_bias = param_data<params, 1>(io_);
    const void* proj_kernel = param_data<params, 2>(io_);
    const float* proj_bias = param_data<params, 3>(io_);
    if constexpr (low_precision) {
      x = scratch_at(x_16bit_at);
      qkv_kernel = scratch_at(qkv_kernel_16bit_at);
      proj_kernel = scratch_at(proj_kernel_16bit_at);
      qkv_bias = reinterpret_cast<const float*>(scratch_at(qkv_bias_16bit_at));
      proj_bias = reinterpret_cast<const float*>(scratch_at(proj_bias_16bit_at));
      if (native_) {
        x = kept_bf16(x_kept_at);
        qkv_kernel = kept_bf16(qkv_kernel_kept_at);
        proj_kernel = kept_bf16(proj_kernel_kept_at);
        y = kept_bf16(y_kept_at);
        d_out = scratch_at(d_out_bf16_at);
        d_qkv_operand = scratch_at(d_qkv_bf16_at);
      }
    }
    qkv_forward_.bind(x, qkv_kernel, qkv_bias, qkv(), scratchpad);
    proj_forward_.bind(y, proj_kernel, proj_bias, io_.out, scratchpad);
    if constexpr (!decoding) {
      if constexpr (!with_lora)
        proj_kernel_grad_.bind(y, d_out, nullptr, param_gradient<params, 2>(io_), scratchpad);
      proj_input_grad_.bind(d_out, proj_kernel, nullptr, d_concat(), scratchpad);
      if constexpr (!with_lora)
        qkv_kernel_grad_.bind(x, d_qkv_operand, nullptr, param_gradient<params, 0>(io_), scratchpad);
      if (io_.d_in) qkv_input_grad_.bind(d_qkv_operand, qkv_kernel, nullptr, io_.d_in, scratchpad);
    }
    if constexpr (with_lora) bind_adapters(scratchpad);
  }

  void forward() {
    if constexpr (low_precision) round_projection_operands();
    qkv_forward_.run();
    if constexpr (low_precision) round(qkv(), rows_3d);
    if constexpr (with_lora) qkv_adapter_.forward();
    if constexpr (decoding) {
      decode_attention();
    } else {
      const bool drop = with_dropout && io_.run && io_.run->training;
      // if constexpr: a policy without native bf16 products compiles no bf16 kernels.
      if constexpr (native_possible) {
        if (native_heads_) for_each_head([&](int pair, int slot) { head_forward_bf16(pair, slot, drop); });
        else for_each_head([&](int pair, int slot) { head_forward(pair, slot, drop); });
      } else {
        for_each_head([&](int pair, int slot) { head_forward(pair, slot, drop); });
      }
    }
    if constexpr (low_precision) round(concat(), rows_d, kept_bf16(y_kept_at));
    proj_forward_.run();
    if constexpr (low_precision) round(io_.out, rows_d);
    if constexpr (with_lora) proj_adapter_.forward();
  }

  void backward() {
    if constexpr (!decoding) {
      if constexpr (low_precision) {
        // The gradient arriving is held in 16 bits. Emulated, the operands
        // are rounded again (scratch does not outlive a call); native, the
        // workspace kept forward's bf16 x, y and kernels.
        round(const_cast<float*>(io_.d_out), rows_d, scratch_bf16(d_out_bf16_at));
        if (!native_) round_projection_operands();
      }
      if constexpr (!with_lora) proj_kernel_grad_.run();
      typeflow::column_sums(io_.d_out, rows, D, param_gradient<params, 3>(io_));
      if constexpr (low_precision) {
        round(param_gradient<params, 2>(io_), Layer::proj_kernel_floats);
        round(param_gradient<params, 3>(io_), std::size_t{D});
      }
      proj_input_grad_.run();
      if constexpr (low_precision) round(d_concat(), rows_d);
      if constexpr (with_lora) proj_adapter_.backward();  // adds to d_y
      const bool drop = with_dropout && io_.run && io_.run->training;
      if constexpr (native_possible) {
        if (native_heads_) for_each_head([&](int pair, int slot) { head_backward_bf16(pair, slot, drop); });
        else for_each_head([&](int pair, int slot) { head_backward(pair, slot, drop); });
      } else {
        for_each_head([&](int pair, int slot) { head_backward(pair, slot, drop); });
      }
      if constexpr (low_precision) round(d_qkv(), rows_3d, scratch_bf16(d_qkv_bf16_at));
      if constexpr (!with_lora) qkv_kernel_grad_.run();
      if constexpr (low_precision) round(param_gradient<params, 0>(io_), Layer::qkv_kernel_floats);
      // d qkv.bias: the samples' shares, summed by the heads' backward.
      float* d_bias = param_gradient<params, 1>(io_);
      const float* shares = bias_shares();
      for (int c = 0; c < 3 * D; ++c) d_bias[c] = 0.f;
      for (int b = 0; b < Batch; ++b)
#pragma omp simd
        for (int c = 0; c < 3 * D; ++c) d_bias[c] += shares[b * 3 * D + c];
      if constexpr (low_precision) round(d_bias, std::size_t{3 * D});
      if (io_.d_in) {
        qkv_input_grad_.run();
        if constexpr (low_precision) round(io_.d_in, rows_d);
      }
      if constexpr (with_lora) qkv_adapter_.backward();  // after d_x is written: it adds to it
    }
  }

 private:
  static constexpr float keep_scale = dropout_rate < 1.f ? 1.f / (1.f - dropout_rate) : 1.f;

  // The 16-bit projections (layers/attention.hpp), after the scratch below:
  // emulated, x rounded (float32); native, d_out and d_qkv in bf16; then the
  // kernels (emulated) and biases rounded. Native, after the workspace's own
  // regions: the bf16 kernels, x and y, from forward to backward.
  using compute_dtype = typename Layer::compute_dtype;
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool native_possible = Layer::native_bf16_possible;
  using bf16_t = bfloat16::value_type;
  static constexpr std::size_t rows_d = static_cast<std::size_t>(rows) * D;
  static constexpr std::size_t rows_3d = 3 * rows_d;
  static constexpr std::size_t x_16bit_at =
      align_up(Batch * Layer::own_scratch_bytes_per_sample + Layer::own_scratch_bytes_per_step);
  static constexpr std::size_t d_out_bf16_at = x_16bit_at;  // native: x is kept in the workspace
  static constexpr std::size_t d_qkv_bf16_at = d_out_bf16_at + align_up(rows_d * sizeof(bf16_t));
  static constexpr std::size_t qkv_kernel_16bit_at =
      std::max(x_16bit_at + align_up(rows_d * sizeof(float)), d_qkv_bf16_at + align_up(rows_3d * sizeof(bf16_t)));
  static constexpr std::size_t proj_kernel_16bit_at =
      qkv_kernel_16bit_at + align_up(Layer::qkv_kernel_floats * sizeof(float));
  static constexpr std::size_t qkv_bias_16bit_at =
      proj_kernel_16bit_at + align_up(Layer::proj_kernel_floats * sizeof(float));
  static constexpr std::size_t proj_bias_16bit_at = qkv_bias_16bit_at + align_up(3 * D * sizeof(float));
  static_assert(!low_precision || proj_bias_16bit_at + align_up(D * sizeof(float)) <=
                                      Batch * Layer::scratch_bytes_per_sample + Layer::scratch_bytes_per_step,
                "causal_self_attention: the 16-bit operands exceed the layer's scratch");
  static constexpr std::size_t qkv_kernel_kept_at =
      align_up(static_cast<std::size_t>(Batch) * Layer::own_workspace_bytes_per_sample);
  static constexpr std::size_t proj_kernel_kept_at = qkv_kernel_kept_at + align_up(Layer::qkv_kernel_floats * 2);
  static constexpr std::size_t x_kept_at = proj_kernel_kept_at + align_up(Layer::proj_kernel_floats * 2);
  static constexpr std::size_t y_kept_at = x_kept_at + align_up(rows_d * 2);
  static_assert(!native_possible || y_kept_at + rows_d * 2 <= Batch * Layer::workspace_bytes_per_sample +
                                                                  Layer::workspace_bytes_per_step,
                "causal_self_attention: the kept bf16 operands exceed the layer's workspace");
  std::byte* scratch_at(std::size_t offset) const { return io_.scratch + offset; }
  bf16_t* scratch_bf16(std::size_t offset) const { return reinterpret_cast<bf16_t*>(io_.scratch + offset); }
  bf16_t* kept_bf16(std::size_t offset) const { return reinterpret_cast<bf16_t*>(io_.workspace + offset); }

  // values rounded to the compute dtype in place and, on the native path,
  // stored in bf16 at bf16_copy too.
  void round(float* values, std::size_t n, bf16_t* bf16_copy = nullptr) const {
    if (native_ && bf16_copy)
      precision::round_in_place_and_store<bfloat16>(values, bf16_copy, n);
    else
      precision::round_in_place<compute_dtype>(values, n);
  }
  // x and the weights as this step's projections see them.
  void round_projection_operands() const {
    const float* qkv_kernel = param_data<params, 0>(io_);
    const float* proj_kernel = param_data<params, 2>(io_);
    if (native_) {
      precision::from_float<bfloat16>(io_.in, kept_bf16(x_kept_at), rows_d);
      precision::refresh(io_.context->weight_copies, qkv_kernel_copy_);
      precision::refresh(io_.context->weight_copies, proj_kernel_copy_);
    } else {
      precision::round_into<compute_dtype>(io_.in, reinterpret_cast<float*>(scratch_at(x_16bit_at)), rows_d);
      precision::round_into<compute_dtype>(qkv_kernel, reinterpret_cast<float*>(scratch_at(qkv_kernel_16bit_at)),
                                           Layer::qkv_kernel_floats);
      precision::round_into<compute_dtype>(proj_kernel, reinterpret_cast<float*>(scratch_at(proj_kernel_16bit_at)),
                                           Layer::proj_kernel_floats);
    }
    precision::round_into<compute_dtype>(param_data<params, 1>(io_), reinterpret_cast<float*>(scratch_at(qkv_bias_16bit_at)),
                                         std::size_t{3 * D});
    precision::round_into<compute_dtype>(param_data<params, 3>(io_),
                                         reinterpret_cast<float*>(scratch_at(proj_bias_16bit_at)), std::size_t{D});
  }

  // Workspace regions (training): qkv, P, y, mask; decoding: the caches.
  float* qkv() const {
    if constexpr (decoding) return reinterpret_cast<float*>(io_.scratch);
    else return reinterpret_cast<float*>(io_.workspace);
  }
  float* probabilities() const { return reinterpret_cast<float*>(io_.workspace + Batch * qkv_bytes); }
  float* concat() const {
    if constexpr (decoding) return reinterpret_cast<float*>(io_.scratch + Batch * decode_qkv_bytes);
    else return reinterpret_cast<float*>(io_.workspace + Batch * (qkv_bytes + probability_bytes));
  }
  std::uint8_t* mask() const {
    return reinterpret_cast<std::uint8_t*>(io_.workspace + Batch * (qkv_bytes + probability_bytes + concat_bytes));
  }
  // Scratch regions (training): d_y, d_qkv, the bias shares, then the
  // threads' slots.
  float* d_concat() const { return reinterpret_cast<float*>(io_.scratch); }
  float* d_qkv() const { return reinterpret_cast<float*>(io_.scratch + Batch * concat_bytes); }
  float* bias_shares() const {  // (Batch, 3D): each sample's column sums of d_qkv
    return reinterpret_cast<float*>(io_.scratch + Batch * (concat_bytes + qkv_bytes));
  }
  // The calling thread's slot: (T, ldp) scores, then the packed panels.
  float* slot_scores(int slot) const {
    return reinterpret_cast<float*>(io_.scratch + Batch * (concat_bytes + qkv_bytes + bias_share_bytes) +
                                    static_cast<std::size_t>(slot) * slot_bytes);
  }
  float* slot_packs(int slot) const { return slot_scores(slot) + slot_scores_floats; }

  // f(pair, slot) for each (sample, head) pair, split over at most
  // head_slots threads; slot is the calling thread's scratch slot.
  template <class F>
  void for_each_head(F&& f) const {
#ifdef _OPENMP
    if (parallel_heads) {
      const int threads = std::min(omp_get_max_threads(), head_slots);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
      for (int pair = 0; pair < pair_count; ++pair) f(pair, omp_get_thread_num());
      return;
    }
#endif
    for (int pair = 0; pair < pair_count; ++pair) f(pair, 0);
  }

  // Draws the keep mask of row i of head `pair`, j in [0, i].
  void draw_mask_row(int pair, int i, std::uint8_t* keep) const {
    const random_stream rng{attention_dropout_seed(io_.run->seed, io_.salt), io_.run->step};
    const auto threshold = static_cast<std::uint32_t>(std::ceil(double{dropout_rate} * 16777216.0));
    const std::uint64_t first = (static_cast<std::uint64_t>(pair) * T + i) * T;
    std::uint32_t words[4];
    std::uint64_t block = ~std::uint64_t{0};
    for (int j = 0; j <= i; ++j) {
      const std::uint64_t e = first + j;
      if (e / 4 != block) {
        block = e / 4;
        rng.block(block, words);
      }
      keep[j] = (words[e % 4] >> 8) >= threshold;
    }
  }

  // Rows i0 .. i0 + n - 1 of P: softmax of the scores there, rounded to
  // the compute dtype (the operand of P v), zeros up to the band's end.
  void softmax_rows(float* p, int i0, int n) const {
    for (int i = i0; i < i0 + n; ++i) {
      detail::attention_kernels::softmax_row(p + i * ldp, i + 1, scale, std::min(T, i + band));
      if constexpr (low_precision) precision::round_row<compute_dtype>(p + i * ldp, static_cast<std::size_t>(i + 1));
    }
  }

  // Row i of P after dropout (rounded), zeros up to the band's end.
  void drop_row(const float* from, const std::uint8_t* keep_row, int i, float* to) const {
#pragma omp simd
    for (int j = 0; j <= i; ++j) to[j] = keep_row[j] ? from[j] * keep_scale : 0.f;
    if constexpr (low_precision) precision::round_row<compute_dtype>(to, static_cast<std::size_t>(i + 1));
    for (int j = i + 1; j < std::min(T, i + band); ++j) to[j] = 0.f;
  }

  // Rows i0 .. i0 + n - 1 of d_S from those of d_P in ds_rows (ldp apart):
  // softmax's backward, rounded to the compute dtype (the operand of d_S k
  // and d_S^T q).
  void softmax_backward_rows(const float* p, int pair, int i0, int n, bool drop, float* ds_rows) const {
    const std::uint8_t* keep = mask() + static_cast<std::ptrdiff_t>(pair) * T * T;
    for (int i = i0; i < i0 + n; ++i) {
      float* row = ds_rows + (i - i0) * ldp;
      detail::attention_kernels::softmax_backward_row(
          p + i * ldp, row, i + 1, scale, (with_dropout && drop) ? keep + static_cast<std::ptrdiff_t>(i) * T : nullptr,
          keep_scale, std::min(T, i + band));
      if constexpr (low_precision) precision::round_row<compute_dtype>(row, static_cast<std::size_t>(i + 1));
    }
  }

  // Head h's columns of sample b's share of d qkv.bias, while its d_q, d_k
  // and d_v (from dq, 3D apart) are still in cache.
  void add_bias_share(int b, int h, const float* dq) const {
    const std::ptrdiff_t qkv_row = 3 * D;
    float* share = bias_shares() + static_cast<std::ptrdiff_t>(b) * qkv_row + h * hd;
    for (int part = 0; part < 3; ++part) {
      float* sums = share + part * D;
      const float* column = dq + part * D;
      for (int d = 0; d < hd; ++d) sums[d] = 0.f;
      for (int t = 0; t < T; ++t)
#pragma omp simd
        for (int d = 0; d < hd; ++d) sums[d] += column[t * qkv_row + d];
    }
  }

  // The buffers one (sample, head) pair works on: its columns of q, k, v
  // (rows 3D apart) and of d_q, d_k, d_v (the same in d_qkv), of y and d_y
  // (D apart), its P (ldp apart) and its dropout mask (T apart).
  struct head_buffers {
    int b, h;
    const float *q, *k, *v, *dy;
    float *dq, *dk, *dv, *p, *y;
    std::uint8_t* keep;
  };
  head_buffers buffers_of(int pair) const {
    const int b = pair / H, h = pair % H;
    const float* q = qkv() + static_cast<std::ptrdiff_t>(b) * T * 3 * D + h * hd;
    float* dq = d_qkv() + static_cast<std::ptrdiff_t>(b) * T * 3 * D + h * hd;
    return {b,
            h,
            q,
            q + D,
            q + 2 * D,
            d_concat() + static_cast<std::ptrdiff_t>(b) * T * D + h * hd,
            dq,
            dq + D,
            dq + 2 * D,
            probabilities() + static_cast<std::ptrdiff_t>(pair) * head_scores,
            concat() + static_cast<std::ptrdiff_t>(b) * T * D + h * hd,
            mask() + static_cast<std::ptrdiff_t>(pair) * T * T};
  }

  // One head of one sample: scores, softmax and y, 6 query rows at a time.
  void head_forward(int pair, int slot, bool drop) const {
    using namespace detail::attention_kernels;
    const auto [b, h, q, k, v, dy, dq, dk, dv, p, y, keep] = buffers_of(pair);
    float* dropped = slot_scores(slot);  // P after dropout
    float* kt_pack = slot_packs(slot);      // k^T (hd x T)
    float* v_pack = kt_pack + pack_floats;  // v (T x hd)
    pack_panels_transposed(hd, T, k, 3 * D, kt_pack);
    pack_panels(T, hd, v, 3 * D, v_pack);
    for (int i0 = 0; i0 < T; i0 += tile_rows) {
      const int n = std::min(tile_rows, T - i0);
      const int columns = i0 + n;  // the tile's rows see keys 0 .. i0 + n - 1
      float* p_rows = p + i0 * ldp;
      tile_product(n, hd, q + static_cast<std::ptrdiff_t>(i0) * 3 * D, 3 * D, 1, kt_pack,
                   static_cast<std::ptrdiff_t>(hd) * panel_width, columns, p_rows, ldp);
      softmax_rows(p, i0, n);
      const float* a = p_rows;
      if (with_dropout && drop) {
        for (int i = i0; i < i0 + n; ++i) {
          std::uint8_t* keep_row = keep + static_cast<std::ptrdiff_t>(i) * T;
          draw_mask_row(pair, i, keep_row);
          drop_row(p + i * ldp, keep_row, i, dropped + i * ldp);
        }
        a = dropped + i0 * ldp;
      }
      tile_product(n, columns, a, ldp, 1, v_pack, static_cast<std::ptrdiff_t>(T) * panel_width, hd,
                   y + static_cast<std::ptrdiff_t>(i0) * D, D);
    }
  }

  // One head's backward: d_v = P'^T d_y, then per 6 rows d_P = d_y v^T,
  // d_S = softmax backward, d_q = d_S k; then d_k = d_S^T q.
  void head_backward(int pair, int slot, bool drop) const {
    using namespace detail::attention_kernels;
    const auto [b, h, q, k, v, dy, dq, dk, dv, p, y, keep] = buffers_of(pair);
    const std::ptrdiff_t qkv_row = 3 * D;
    float* ds = slot_scores(slot);
    float* vt_pack = slot_packs(slot);       // v^T (hd x T)
    float* dy_pack = vt_pack + pack_floats;  // d_y (T x hd)
    float* k_pack = dy_pack + pack_floats;   // k (T x hd)
    float* q_pack = k_pack + pack_floats;    // q (T x hd)
    pack_panels_transposed(hd, T, v, qkv_row, vt_pack);
    pack_panels(T, hd, dy, D, dy_pack);
    pack_panels(T, hd, k, qkv_row, k_pack);
    pack_panels(T, hd, q, qkv_row, q_pack);
    const std::ptrdiff_t t_panel = static_cast<std::ptrdiff_t>(T) * panel_width;
    const std::ptrdiff_t hd_panel = static_cast<std::ptrdiff_t>(hd) * panel_width;

    // d_v rows j0.. = sum over queries i >= j0 of P'[i][j] d_y[i].
    const float* a = p;
    if (with_dropout && drop) {  // P' into d_S's place, overwritten below
      for (int i = 0; i < T; ++i) drop_row(p + i * ldp, keep + static_cast<std::ptrdiff_t>(i) * T, i, ds + i * ldp);
      a = ds;
    }
    for (int j0 = 0; j0 < T; j0 += tile_rows) {
      const int n = std::min(tile_rows, T - j0);
      tile_product(n, T - j0, a + j0 * ldp + j0, 1, ldp, dy_pack + j0 * panel_width, t_panel, hd,
                   dv + j0 * qkv_row, qkv_row);
    }
    for (int i0 = 0; i0 < T; i0 += tile_rows) {
      const int n = std::min(tile_rows, T - i0);
      const int columns = i0 + n;
      float* ds_rows = ds + i0 * ldp;
      tile_product(n, hd, dy + static_cast<std::ptrdiff_t>(i0) * D, D, 1, vt_pack, hd_panel, columns, ds_rows, ldp);
      softmax_backward_rows(p, pair, i0, n, drop, ds_rows);
      tile_product(n, columns, ds_rows, ldp, 1, k_pack, t_panel, hd, dq + i0 * qkv_row, qkv_row);
    }
    for (int j0 = 0; j0 < T; j0 += tile_rows) {
      const int n = std::min(tile_rows, T - j0);
      tile_product(n, T - j0, ds + j0 * ldp + j0, 1, ldp, q_pack + j0 * panel_width, t_panel, hd,
                   dk + j0 * qkv_row, qkv_row);
    }
    add_bias_share(b, h, dq);
  }

  // The native slot (layers/attention.hpp), in pair words: P' and then d_S
  // transposed, a row block of d_S in float32, a row block of P' or d_S and
  // one of q or d_y as pair rows, and four pair-panel packs.
  struct pair_slot {
    std::uint32_t* transposed;      // (pairs(T), T): word (i/2, j) = (X[i][j], X[i+1][j])
    float* rows;                    // (6, ldp)
    std::uint32_t* row_pairs;       // (6, pairs(T))
    std::uint32_t* head_row_pairs;  // (6, pairs(hd))
    std::uint32_t* packs;           // 4 x pair_pack_words
  };
  static constexpr int Tp = static_cast<int>(Layer::step_pairs), hp = static_cast<int>(Layer::head_pairs);
  pair_slot native_slot(int slot) const {
    auto* w = reinterpret_cast<std::uint32_t*>(slot_scores(slot));
    pair_slot s{};
    s.transposed = w;
    w += Layer::transposed_words;
    s.rows = reinterpret_cast<float*>(w);
    w += aligned_floats(band * score_stride);
    s.row_pairs = w;
    w += aligned_floats(band * Layer::step_pairs);
    s.head_row_pairs = w;
    w += aligned_floats(band * Layer::head_pairs);
    s.packs = w;
    return s;
  }

  // head_forward with bf16 products: the same values up to the order of the sums.
  void head_forward_bf16([[maybe_unused]] int pair, [[maybe_unused]] int slot, [[maybe_unused]] bool drop) const {
#ifdef TYPEFLOW_ATTENTION_BF16_KERNELS
    using namespace detail::attention_kernels;
    const auto [b, h, q, k, v, dy, dq, dk, dv, p, y, keep] = buffers_of(pair);
    const pair_slot s = native_slot(slot);
    std::uint32_t* kt_pack = s.packs;                           // k^T (hd x T)
    std::uint32_t* v_pack = s.packs + Layer::pair_pack_words;  // v (T x hd)
    pack_panel_pairs_transposed(hd, T, k, 3 * D, kt_pack);
    pack_panel_pairs(T, hd, v, 3 * D, v_pack);
    for (int i0 = 0; i0 < T; i0 += tile_rows) {
      const int n = std::min(tile_rows, T - i0);
      const int columns = i0 + n;
      pack_row_pairs(n, hd, q + static_cast<std::ptrdiff_t>(i0) * 3 * D, 3 * D, s.head_row_pairs, hp);
      tile_product_bf16(n, hp, s.head_row_pairs, hp, 1, kt_pack, std::ptrdiff_t{hp} * pair_panel_width, columns,
                        p + i0 * ldp, ldp);
      softmax_rows(p, i0, n);
      const float* a = p + i0 * ldp;
      if (with_dropout && drop) {
        for (int i = i0; i < i0 + n; ++i) {
          std::uint8_t* keep_row = keep + static_cast<std::ptrdiff_t>(i) * T;
          draw_mask_row(pair, i, keep_row);
          drop_row(p + i * ldp, keep_row, i, s.rows + (i - i0) * ldp);
        }
        a = s.rows;
      }
      pack_row_pairs(n, columns, a, ldp, s.row_pairs, Tp);
      tile_product_bf16(n, pairs(columns), s.row_pairs, Tp, 1, v_pack, std::ptrdiff_t{Tp} * pair_panel_width, hd,
                        y + static_cast<std::ptrdiff_t>(i0) * D, D);
    }
#endif
  }

  // head_backward with bf16 products. P' and d_S go in transposed (pair
  // words of two rows) for d_v = P'^T d_y and d_k = d_S^T q; a tile of rows
  // j0.. there reads word (i/2, j) for i >= j0 and j < j0 + 6 <= i + 6 only,
  // so each pair of rows is written up to its band's end.
  void head_backward_bf16([[maybe_unused]] int pair, [[maybe_unused]] int slot, [[maybe_unused]] bool drop) const {
#ifdef TYPEFLOW_ATTENTION_BF16_KERNELS
    using namespace detail::attention_kernels;
    const auto [b, h, q, k, v, dy, dq, dk, dv, p, y, keep] = buffers_of(pair);
    const std::ptrdiff_t qkv_row = 3 * D;
    const pair_slot s = native_slot(slot);
    constexpr std::ptrdiff_t pack = Layer::pair_pack_words;
    std::uint32_t* vt_pack = s.packs;           // v^T (hd x T)
    std::uint32_t* dy_pack = s.packs + pack;      // d_y (T x hd)
    std::uint32_t* k_pack = s.packs + 2 * pack;   // k (T x hd)
    std::uint32_t* q_pack = s.packs + 3 * pack;   // q (T x hd)
    pack_panel_pairs_transposed(hd, T, v, qkv_row, vt_pack);
    pack_panel_pairs(T, hd, dy, D, dy_pack);
    pack_panel_pairs(T, hd, k, qkv_row, k_pack);
    pack_panel_pairs(T, hd, q, qkv_row, q_pack);
    const std::ptrdiff_t t_panel = std::ptrdiff_t{Tp} * pair_panel_width;
    const std::ptrdiff_t hd_panel = std::ptrdiff_t{hp} * pair_panel_width;

    // d_v = P'^T d_y.
    for (int i = 0; i < T; i += 2) {
      const float* r0 = p + i * ldp;
      const float* r1 = i + 1 < T ? r0 + ldp : nullptr;
      if (with_dropout && drop) {
        drop_row(r0, keep + static_cast<std::ptrdiff_t>(i) * T, i, s.rows);
        r0 = s.rows;
        if (r1) {
          drop_row(r1, keep + static_cast<std::ptrdiff_t>(i + 1) * T, i + 1, s.rows + ldp);
          r1 = s.rows + ldp;
        }
      }
      interleave_rows(r0, r1, std::min(T, i + band), s.transposed + static_cast<std::ptrdiff_t>(i / 2) * T);
    }
    for (int j0 = 0; j0 < T; j0 += tile_rows) {
      const int n = std::min(tile_rows, T - j0);
      tile_product_bf16(n, Tp - j0 / 2, s.transposed + static_cast<std::ptrdiff_t>(j0 / 2) * T + j0, 1, T,
                        dy_pack + (j0 / 2) * pair_panel_width, t_panel, hd, dv + j0 * qkv_row, qkv_row);
    }
    // Per 6 rows: d_P = d_y v^T, d_S, d_q = d_S k, and d_S into the transposed rows.
    for (int i0 = 0; i0 < T; i0 += tile_rows) {
      const int n = std::min(tile_rows, T - i0);
      const int columns = i0 + n;
      pack_row_pairs(n, hd, dy + static_cast<std::ptrdiff_t>(i0) * D, D, s.head_row_pairs, hp);
      tile_product_bf16(n, hp, s.head_row_pairs, hp, 1, vt_pack, hd_panel, columns, s.rows, ldp);
      softmax_backward_rows(p, pair, i0, n, drop, s.rows);
      pack_row_pairs(n, columns, s.rows, ldp, s.row_pairs, Tp);
      tile_product_bf16(n, pairs(columns), s.row_pairs, Tp, 1, k_pack, t_panel, hd, dq + i0 * qkv_row, qkv_row);
      for (int i = i0; i < i0 + n; i += 2) {
        const float* r0 = s.rows + (i - i0) * ldp;
        interleave_rows(r0, i + 1 < i0 + n ? r0 + ldp : nullptr, std::min(T, i + band),
                        s.transposed + static_cast<std::ptrdiff_t>(i / 2) * T);
      }
    }
    // d_k = d_S^T q.
    for (int j0 = 0; j0 < T; j0 += tile_rows) {
      const int n = std::min(tile_rows, T - j0);
      tile_product_bf16(n, Tp - j0 / 2, s.transposed + static_cast<std::ptrdiff_t>(j0 / 2) * T + j0, 1, T,
                        q_pack + (j0 / 2) * pair_panel_width, t_panel, hd, dk + j0 * qkv_row, qkv_row);
    }
    add_bias_share(b, h, dq);
#endif
  }

  // Decoding: the position's k and v into the caches, then each head's
  // attention over the cached positions 0..position.
  void decode_attention() const {
    const int position = io_.run ? io_.run->position : 0;
    const int seen = position + 1;
    auto* caches = reinterpret_cast<float*>(io_.workspace);
    const float* qkv_rows = qkv();
    for (int b = 0; b < Batch; ++b) {
      float* key_cache = caches + static_cast<std::ptrdiff_t>(b) * 2 * cache_floats;
      float* value_cache = key_cache + cache_floats;
      const float* row = qkv_rows + static_cast<std::ptrdiff_t>(b) * 3 * D;
      std::memcpy(key_cache + static_cast<std::ptrdiff_t>(position) * D, row + D, sizeof(float) * D);
      std::memcpy(value_cache + static_cast<std::ptrdiff_t>(position) * D, row + 2 * D, sizeof(float) * D);
    }
    float* y_rows = concat();
    float* scores_all = reinterpret_cast<float*>(io_.scratch + Batch * (decode_qkv_bytes + decode_concat_bytes));
#pragma omp parallel for schedule(static) if (std::size_t{Batch} * H * keys * hd >= std::size_t{1} << 16)
    for (int pair = 0; pair < pair_count; ++pair) {
      const int b = pair / H, h = pair % H;
      const float* key_cache = caches + static_cast<std::ptrdiff_t>(b) * 2 * cache_floats + h * hd;
      const float* value_cache = key_cache + cache_floats;
      const float* q = qkv_rows + static_cast<std::ptrdiff_t>(b) * 3 * D + h * hd;
      float* scores = scores_all + static_cast<std::ptrdiff_t>(pair) * static_cast<std::ptrdiff_t>(keys);
      for (int j = 0; j < seen; ++j) {
        const float* key = key_cache + static_cast<std::ptrdiff_t>(j) * D;
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < hd; ++d) dot += q[d] * key[d];
        scores[j] = dot;
      }
      detail::attention_kernels::softmax_row(scores, seen, scale, seen);
      if constexpr (low_precision) precision::round_row<compute_dtype>(scores, static_cast<std::size_t>(seen));
      float* y = y_rows + static_cast<std::ptrdiff_t>(b) * D + h * hd;
      for (int d = 0; d < hd; ++d) y[d] = 0.f;
      for (int j = 0; j < seen; ++j) {
        const float weight = scores[j];
        const float* value = value_cache + static_cast<std::ptrdiff_t>(j) * D;
#pragma omp simd
        for (int d = 0; d < hd; ++d) y[d] += weight * value[d];
      }
    }
  }

  layer_io<cpu> io_;
  float scale;  // 1 / sqrt(hd)
  bool native_;  // the projections run as oneDNN bf16 primitives
  std::size_t qkv_kernel_copy_ = 0, proj_kernel_copy_ = 0;  // native: their kernels' bf16 copies in the context
  bool native_heads_;  // and the per-head products as bf16 kernels
  backend::cpu::matmul qkv_forward_, proj_forward_;
  backend::cpu::matmul proj_kernel_grad_, proj_input_grad_, qkv_kernel_grad_, qkv_input_grad_;
  backend::cpu::lora_adapter qkv_adapter_, proj_adapter_;  // with lora<> only

  // The adapters' buffers, after the layer's own workspace: for each, x · A
  // then d_y · B^T, (rows, Rank).
  void bind_adapters(std::byte* scratchpad) {
    constexpr std::size_t buffer = lora_buffer_bytes(static_cast<std::size_t>(rows), Layer::lora_rank);
    std::byte* at = io_.workspace + align_up(static_cast<std::size_t>(Batch) * Layer::own_workspace_bytes_per_sample);
    float* b[4];
    for (auto& p : b) {
      p = reinterpret_cast<float*>(at);
      at += buffer;
    }
    if constexpr (decoding) {
      qkv_adapter_.bind(io_.in, param_data<params, 4>(io_), param_data<params, 5>(io_), qkv(), b[0], b[1], nullptr,
                        nullptr, nullptr, nullptr, scratchpad);
      proj_adapter_.bind(concat(), param_data<params, 6>(io_), param_data<params, 7>(io_), io_.out, b[2], b[3],
                         nullptr, nullptr, nullptr, nullptr, scratchpad);
    } else {
      qkv_adapter_.bind(io_.in, param_data<params, 4>(io_), param_data<params, 5>(io_), qkv(), b[0], b[1], d_qkv(),
                        param_gradient<params, 4>(io_), param_gradient<params, 5>(io_), io_.d_in, scratchpad);
      proj_adapter_.bind(concat(), param_data<params, 6>(io_), param_data<params, 7>(io_), io_.out, b[2], b[3],
                         io_.d_out, param_gradient<params, 6>(io_), param_gradient<params, 7>(io_), d_concat(),
                         scratchpad);
    }
  }
};

}  // namespace typeflow
