// A LoRA adapter's products on the CPU (layers/lora.hpp), for any layer
// whose product y = x · W it adapts (dense, attention's qkv and proj):
//
//   forward    t   (rows, r)   = s · x (rows, in) · A (in, r)
//              y   (rows, out) += t · B (r, out)
//   backward   dB  (r, out)    = t^T · d_y
//              u   (rows, r)   = s · d_y · B^T
//              dA  (in, r)     = x^T · u
//              d_x (rows, in)  += u · A^T          (when a gradient is wanted)
//
// with s = Alpha / Rank: dB = s (xA)^T d_y, dA = s x^T (d_y B^T) and
// d_x = d_y (s A B)^T, the gradients of y += s x A B. t is kept from forward
// to backward; both t and u live in the layer's workspace. Six oneDNN
// matmuls, created once, bound once, each (rows x r) thin.
#pragma once

#include <algorithm>
#include <cstddef>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/backend/cpu/matmul.hpp"

namespace typeflow::backend::cpu {

class lora_adapter {
 public:
  struct shape {
    int rows = 0, in = 0, out = 0, rank = 0;
    float scale = 1.f;
    int a_stride = 0, b_stride = 0;  // A's and B's padded rows (padded_row_length)
    int x_stride = 0, y_stride = 0;  // 0: the row's length
  };

  lora_adapter() = default;
  lora_adapter(context& ctx, shape s, bool training, bool input_gradient) : shape_(s) {
    const int x_ld = s.x_stride ? s.x_stride : s.in, y_ld = s.y_stride ? s.y_stride : s.out;
    down_ = matmul(ctx, {s.rows, s.rank, s.in, false, false, x_ld, s.a_stride, 0}, false, epilogue::none, false, s.scale);
    up_ = matmul(ctx, {s.rows, s.out, s.rank, false, false, 0, s.b_stride, y_ld}, false, epilogue::none, true);
    if (!training) return;
    b_grad_ = matmul(ctx, {s.rank, s.out, s.rows, true, false, 0, y_ld, s.b_stride}, false);
    back_down_ = matmul(ctx, {s.rows, s.rank, s.out, false, true, y_ld, s.b_stride, 0}, false, epilogue::none, false,
                        s.scale);
    a_grad_ = matmul(ctx, {s.in, s.rank, s.rows, true, false, x_ld, 0, s.a_stride}, false);
    if (input_gradient)
      input_grad_ = matmul(ctx, {s.rows, s.in, s.rank, false, true, 0, s.a_stride, x_ld}, false, epilogue::none, true);
  }

  std::size_t scratchpad_bytes() const {
    return std::max({down_.scratchpad_bytes(), up_.scratchpad_bytes(), b_grad_.scratchpad_bytes(),
                     back_down_.scratchpad_bytes(), a_grad_.scratchpad_bytes(), input_grad_.scratchpad_bytes()});
  }

  // The addresses, fixed for the executor's life; t and u are (rows, rank)
  // buffers of the layer's workspace. Gradient pointers may be null when
  // the layer does not train (a decoder).
  void bind(const float* x, const float* a, const float* b, float* y, float* t, float* u, const float* d_y,
            float* d_a, float* d_b, float* d_x, std::byte* scratchpad) {
    down_.bind(x, a, nullptr, t, scratchpad);
    up_.bind(t, b, nullptr, y, scratchpad);
    if (!d_a) return;
    b_grad_.bind(t, d_y, nullptr, d_b, scratchpad);
    back_down_.bind(d_y, b, nullptr, u, scratchpad);
    a_grad_.bind(x, u, nullptr, d_a, scratchpad);
    if (d_x) input_grad_.bind(u, a, nullptr, d_x, scratchpad);
    input_gradient_ = d_x != nullptr;
  }

  // y += s · x A B (after the layer's own product has written y).
  void forward() const {
    down_.run();
    up_.run();
  }
  // dA, dB, and d_x += s · d_y B^T A^T (after the layer has written d_x).
  void backward() const {
    b_grad_.run();
    back_down_.run();
    a_grad_.run();
    if (input_gradient_) input_grad_.run();
  }

 private:
  shape shape_{};
  matmul down_, up_, b_grad_, back_down_, a_grad_, input_grad_;
  bool input_gradient_ = false;
};

}  // namespace typeflow::backend::cpu
