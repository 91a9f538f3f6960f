// A matrix product's description, shared by the CPU (oneDNN) and CUDA
// (cuBLASLt) backends:
//
//   C (m, n) = op(A) (m, k) · op(B) (k, n)  [+ bias (n)]  [then epilogue]
//
// row-major, with op() a transpose expressed through strides.
#pragma once

namespace typeflow {

// What may follow a product inside the same kernel. gelu_tanh only on the
// GPU, after a dense (layers/activation_traits.hpp's epilogue_between):
// cuBLASLt's GELU_AUX epilogue also keeps the product, whose gelu' the
// dense's backward needs.
enum class epilogue { none, relu, tanh, sigmoid, gelu_tanh };

struct gemm_shape {
  int m = 0, n = 0, k = 0;
  bool transpose_a = false;  // A is stored (k, m) row-major
  bool transpose_b = false;  // B is stored (n, k) row-major
  // Row strides in elements when rows are padded; 0 means the row's length.
  int lda = 0, ldb = 0, ldc = 0;
};

}  // namespace typeflow
