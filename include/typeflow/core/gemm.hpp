// A matrix product's description, shared by the CPU (oneDNN) and CUDA
// (cuBLASLt) backends:
//
//   C (m, n) = op(A) (m, k) · op(B) (k, n)  [+ bias (n)]  [then epilogue]
//
// row-major, with op() a transpose expressed through strides.
#pragma once

namespace typeflow {

// What may follow a product inside the same kernel.
enum class epilogue { none, relu, tanh, sigmoid };

struct gemm_shape {
  int m = 0, n = 0, k = 0;
  bool transpose_a = false;  // A is stored (k, m) row-major
  bool transpose_b = false;  // B is stored (n, k) row-major
  // Row strides in elements when rows are padded; 0 means the row's length.
  int lda = 0, ldb = 0, ldc = 0;
};

}  // namespace typeflow
