// The CUDA gemm: cuBLASLt behind the same row-major description as the CPU
// backend (typeflow/core/gemm.hpp):
//
//   C (m, n) = op(A) (m, k) · op(B) (k, n)  [+ C]  [+ bias (n)]  [then activation]
//
// Descriptors, layouts and the algorithm are chosen once, in the constructor;
// run() only points the epilogue at this call's bias / aux buffers and
// launches, so it allocates nothing and can be captured in a CUDA graph.
//
// Row-major to column-major: a row-major (r, c) matrix with row stride ld is,
// byte for byte, a column-major (c, r) matrix with leading dimension ld. So
// the row-major C = op(A)·op(B) is computed as the column-major
// Cᵀ (n, m) = op(B)ᵀ (n, k) · op(A)ᵀ (k, m): cuBLASLt's "A" is our B and its
// "B" is our A, each with the transpose flag it already has, and cuBLASLt's
// "rows of D" are our n columns. Hence bias (one per row of D in cuBLASLt's
// terms) is one per output column here, as a layer wants.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/gemm.hpp"

namespace typeflow::backend::cuda {

// float32: fp32 in, fp32 out, fp32 math. tf32: fp32 in and out, products on
// TF32 tensor cores (10-bit mantissa inputs). float16 / bfloat16: 16-bit A and
// B (__half / __nv_bfloat16), fp32 accumulation, C either fp32 or the same
// 16-bit type (output_16bit).
enum class gemm_precision { float32, tf32, float16, bfloat16 };

// Row-major meaning, with pre = op(A)·op(B) [+ C when accumulating] [+ bias[j]]:
//   none           C = pre (no bias)
//   bias           C[i][j] = pre
//   relu_bias      C[i][j] = max(pre, 0)
//   gelu_bias      C[i][j] = gelu(pre), the tanh approximation (see below)
//   gelu_aux_bias  as gelu_bias, and aux[i * aux_ld() + j] = pre, for the backward pass
//   bias_gradient  C = op(A)·op(B) [+ C], and db[j] = Σ_k op(B)[k][j]: for the weight
//                  gradient dW (in, out) = Xᵀ (in, rows) · dZ (rows, out) it writes
//                  db (out) = column sums of dZ. db is overwritten, even when accumulating.
// bias, aux and db have C's element type (cuBLASLt's default for Dtype).
//
// GELU: cuBLASLt does not spell out its formula; PyTorch treats the epilogue as
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (it applies gelu(approximate="tanh")
// where the epilogue is unavailable), and matmul_test.cu checks which one it is.
enum class gemm_epilogue { none, bias, relu_bias, gelu_bias, gelu_aux_bias, bias_gradient };

inline const char* to_string(gemm_precision p) noexcept {
  switch (p) {
    case gemm_precision::float32: return "float32";
    case gemm_precision::tf32: return "tf32";
    case gemm_precision::float16: return "float16";
    case gemm_precision::bfloat16: return "bfloat16";
  }
  return "?";
}

inline const char* to_string(gemm_epilogue e) noexcept {
  switch (e) {
    case gemm_epilogue::none: return "none";
    case gemm_epilogue::bias: return "bias";
    case gemm_epilogue::relu_bias: return "relu_bias";
    case gemm_epilogue::gelu_bias: return "gelu_bias";
    case gemm_epilogue::gelu_aux_bias: return "gelu_aux_bias";
    case gemm_epilogue::bias_gradient: return "bias_gradient";
  }
  return "?";
}

class cublas_error : public std::runtime_error {
 public:
  cublas_error(cublasStatus_t code, const char* call, const std::string& context)
      : std::runtime_error(std::string("typeflow: cuBLASLt call ") + call + " failed" +
                           (context.empty() ? std::string() : " for " + context) + ": " +
                           cublasLtGetStatusName(code) + " (" + cublasLtGetStatusString(code) + ")"),
        code_(code) {}
  cublasStatus_t code() const noexcept { return code_; }

 private:
  cublasStatus_t code_;
};

namespace detail {
inline void check_lt(cublasStatus_t code, const char* call, const std::string& context) {
  if (code != CUBLAS_STATUS_SUCCESS) throw cublas_error(code, call, context);
}
}  // namespace detail

// Owns one cuBLASLt context, tied to the device current at construction.
class lt_handle {
 public:
  lt_handle() { detail::check_lt(cublasLtCreate(&handle_), "cublasLtCreate", ""); }
  ~lt_handle() {
    if (handle_) (void)cublasLtDestroy(handle_);
  }
  lt_handle(lt_handle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  lt_handle& operator=(lt_handle&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  cublasLtHandle_t get() const noexcept { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

class matmul {
 public:
  // Every matrix and vector given to run() (A, B, C, bias, aux/db) must be
  // aligned to this many bytes; the algorithm is chosen assuming no more.
  // 16 bytes is what Hopper's TMA loads need, and lets operands be views into
  // a larger arena rather than separate cudaMallocs.
  static constexpr std::uint32_t alignment_bytes = 16;

  matmul() = default;  // empty: run() fails until assigned a real one
  matmul(cublasLtHandle_t handle, gemm_shape shape, gemm_precision precision,
         gemm_epilogue epilogue = gemm_epilogue::none, bool output_16bit = false, bool accumulate = false,
         std::size_t workspace_bytes = std::size_t{32} << 20)
      : handle_(handle), shape_(shape), precision_(precision), epilogue_(epilogue), output_16bit_(output_16bit),
        beta_(accumulate ? 1.f : 0.f) {
    context_ = describe();
    validate();
    const int m = shape.m, n = shape.n, k = shape.k;
    const std::int64_t lda = shape.lda ? shape.lda : (shape.transpose_a ? m : k);
    const std::int64_t ldb = shape.ldb ? shape.ldb : (shape.transpose_b ? k : n);
    const std::int64_t ldc = shape.ldc ? shape.ldc : n;

    const bool sixteen = precision == gemm_precision::float16 || precision == gemm_precision::bfloat16;
    const cudaDataType_t in_type = precision == gemm_precision::float16    ? CUDA_R_16F
                                   : precision == gemm_precision::bfloat16 ? CUDA_R_16BF
                                                                           : CUDA_R_32F;
    const cudaDataType_t out_type = sixteen && output_16bit ? in_type : CUDA_R_32F;
    const cublasComputeType_t compute =
        precision == gemm_precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

    try {
      check(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
      // cuBLASLt's A is our B: stored (k, n) row-major = (n, k) column-major, already op(B)ᵀ;
      // stored transposed, (n, k) row-major = (k, n) column-major, which needs a transpose.
      const cublasOperation_t op_lt_a = shape.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t op_lt_b = shape.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
      set_desc(CUBLASLT_MATMUL_DESC_TRANSA, op_lt_a);
      set_desc(CUBLASLT_MATMUL_DESC_TRANSB, op_lt_b);
      // Layouts describe the matrices as stored (before op), column-major.
      check(cublasLtMatrixLayoutCreate(&layout_a_, in_type, shape.transpose_b ? k : n,
                                       shape.transpose_b ? n : k, ldb),
            "cublasLtMatrixLayoutCreate(B)");
      check(cublasLtMatrixLayoutCreate(&layout_b_, in_type, shape.transpose_a ? m : k,
                                       shape.transpose_a ? k : m, lda),
            "cublasLtMatrixLayoutCreate(A)");
      check(cublasLtMatrixLayoutCreate(&layout_c_, out_type, n, m, ldc), "cublasLtMatrixLayoutCreate(C)");

      set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue());
      // The heuristic reads the bias / aux pointers' values (never their
      // contents) to learn their alignment: stand-ins with exactly the
      // alignment run() promises, replaced by the real ones in run().
      const void* stand_in = reinterpret_cast<const void*>(std::uintptr_t{alignment_bytes});
      if (epilogue != gemm_epilogue::none) set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, stand_in);
      if (epilogue == gemm_epilogue::gelu_aux_bias) {
        // aux is D-shaped (n rows in cuBLASLt's terms); its ld must be a multiple of 8.
        aux_ld_ = (static_cast<std::int64_t>(n) + 7) / 8 * 8;
        set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld_);
        set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, stand_in);
      }

      pick_algorithm(workspace_bytes);
    } catch (...) {
      release();
      throw;
    }
  }

  ~matmul() { release(); }
  matmul(const matmul&) = delete;
  matmul& operator=(const matmul&) = delete;
  matmul(matmul&& o) noexcept { steal(o); }
  matmul& operator=(matmul&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }

  // a, b: op(A), op(B)'s storage; c: C (read too when accumulating).
  // bias_or_null: bias (n) for the *_bias epilogues.
  // aux_or_bias_grad_or_null: aux (m × aux_ld()) for gelu_aux_bias, db (n) for bias_gradient.
  // workspace: workspace_bytes() bytes, 256-byte aligned (may be null when that is 0).
  // Sets this call's epilogue pointers on the shared descriptor, so one matmul
  // must not run() from two host threads at once. Under stream capture the
  // pointers are baked into the graph; the workspace must outlive its launches.
  void run(const void* a, const void* b, void* c, const void* bias_or_null, void* aux_or_bias_grad_or_null,
           void* workspace, cudaStream_t stream) const {
    if (desc_ == nullptr)
      throw std::logic_error("typeflow: cuda::matmul::run on an empty (default or moved-from) matmul");
    require(a, "A");
    require(b, "B");
    require(c, "C");
    switch (epilogue_) {
      case gemm_epilogue::none: break;
      case gemm_epilogue::bias:
      case gemm_epilogue::relu_bias:
      case gemm_epilogue::gelu_bias: {
        require(bias_or_null, "bias");
        set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_or_null);
        break;
      }
      case gemm_epilogue::gelu_aux_bias: {
        require(bias_or_null, "bias");
        require(aux_or_bias_grad_or_null, "aux");
        set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_or_null);
        set_desc(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_or_bias_grad_or_null);
        break;
      }
      case gemm_epilogue::bias_gradient: {
        require(aux_or_bias_grad_or_null, "bias gradient");
        set_desc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, aux_or_bias_grad_or_null);
        break;
      }
    }
    // cuBLAS asks for 256-byte aligned workspaces (what cudaMalloc returns).
    if (workspace_bytes_ != 0) require(workspace, "workspace", 256);
    // Our A is cuBLASLt's B and vice versa; C and D are the same buffer.
    check(cublasLtMatmul(handle_, desc_, &alpha_, b, layout_a_, a, layout_b_, &beta_, c, layout_c_, c, layout_c_,
                         &algorithm_, workspace, workspace_bytes_, stream),
          "cublasLtMatmul");
  }

  // One of cuBLASLt's heuristic answers for this product. The algorithm is
  // kept as its 64 bytes: cuBLASLt's types are typedef'd unnamed structs,
  // which nvcc 13.0's front end cannot put in a std::vector (it aborts in
  // find_allocated_name_reference).
  struct candidate {
    std::uint64_t algorithm[8] = {};
    std::size_t workspace_bytes = 0;
    float waves = 0;  // the heuristic's waves count: tiles over the device's multiprocessors
  };
  static constexpr int most_candidates = 32;
  // At most `count` answers, best first by the heuristic's own ranking, each
  // needing at most `workspace_limit` bytes: what an autotuner times
  // (bench/gpu/gemm_algos.cu). The constructor takes the first.
  std::vector<candidate> candidates(int count, std::size_t workspace_limit) const {
    cublasLtMatmulPreference_t preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    cublasLtMatmulHeuristicResult_t results[most_candidates] = {};
    const int asked = count < 1 ? 1 : (count > most_candidates ? most_candidates : count);
    int found = 0;
    try {
      const std::uint64_t limit = workspace_limit;
      set_pref(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, limit);
      const std::uint32_t alignment = alignment_bytes;
      set_pref(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment);
      set_pref(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment);
      set_pref(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment);
      set_pref(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment);
      // Split-K partials only in fp32 in the workspace: reducing them in C's
      // type (INPLACE, OUTPUT_TYPE) would round 16-bit outputs once per split
      // and, in place, depend on the order the pieces land.
      const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      set_pref(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
      check(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_a_, layout_b_, layout_c_, layout_c_, preference,
                                           asked, results, &found),
            "cublasLtMatmulAlgoGetHeuristic");
    } catch (...) {
      (void)cublasLtMatmulPreferenceDestroy(preference);
      throw;
    }
    (void)cublasLtMatmulPreferenceDestroy(preference);
    static_assert(sizeof(candidate::algorithm) == sizeof(cublasLtMatmulAlgo_t));
    std::vector<candidate> out;
    for (int i = 0; i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      candidate c;
      std::memcpy(c.algorithm, &results[i].algo, sizeof c.algorithm);
      c.workspace_bytes = results[i].workspaceSize;
      c.waves = results[i].wavesCount;
      out.push_back(c);
    }
    return out;
  }
  // Runs with `c` from now on; run() then needs c.workspace_bytes of workspace.
  void use(const candidate& c) noexcept {
    std::memcpy(&algorithm_, c.algorithm, sizeof c.algorithm);
    workspace_bytes_ = c.workspace_bytes;
  }

  // The workspace the chosen algorithm needs (at most the constructor's limit).
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
  // Row stride, in elements of C's type, of gelu_aux_bias's aux (0 otherwise).
  std::int64_t aux_ld() const noexcept { return aux_ld_; }
  const gemm_shape& shape() const noexcept { return shape_; }
  gemm_precision precision() const noexcept { return precision_; }
  gemm_epilogue epilogue() const noexcept { return epilogue_; }
  bool output_16bit() const noexcept { return output_16bit_; }
  bool accumulate() const noexcept { return beta_ != 0.f; }
  // "m=.. n=.. k=.. ...": what error messages name.
  const std::string& description() const noexcept { return context_; }

 private:
  std::string describe() const {
    std::string s = "GEMM m=" + std::to_string(shape_.m) + " n=" + std::to_string(shape_.n) +
                    " k=" + std::to_string(shape_.k);
    if (shape_.transpose_a) s += " A^T";
    if (shape_.transpose_b) s += " B^T";
    if (shape_.lda) s += " lda=" + std::to_string(shape_.lda);
    if (shape_.ldb) s += " ldb=" + std::to_string(shape_.ldb);
    if (shape_.ldc) s += " ldc=" + std::to_string(shape_.ldc);
    s += std::string(" ") + to_string(precision_);
    if (output_16bit_) s += " (16-bit C)";
    s += std::string(" epilogue=") + to_string(epilogue_);
    if (beta_ != 0.f) s += " accumulate";
    return s;
  }

  void validate() const {
    auto fail = [&](const std::string& why) {
      throw std::invalid_argument("typeflow: cuda::matmul " + context_ + ": " + why);
    };
    if (shape_.m <= 0 || shape_.n <= 0 || shape_.k <= 0) fail("m, n and k must be positive");
    const int a_row = shape_.transpose_a ? shape_.m : shape_.k;
    const int b_row = shape_.transpose_b ? shape_.k : shape_.n;
    if (shape_.lda < 0 || (shape_.lda && shape_.lda < a_row)) fail("lda is shorter than A's rows");
    if (shape_.ldb < 0 || (shape_.ldb && shape_.ldb < b_row)) fail("ldb is shorter than B's rows");
    if (shape_.ldc < 0 || (shape_.ldc && shape_.ldc < shape_.n)) fail("ldc is shorter than C's rows");
    const bool sixteen = precision_ == gemm_precision::float16 || precision_ == gemm_precision::bfloat16;
    if (output_16bit_ && !sixteen) fail("a 16-bit C needs float16 or bfloat16 inputs");
    // BGRADA reduces cuBLASLt's A (our B, dZ) over k, and cuBLASLt supports it
    // only for a non-transposed A: dZ must be stored (rows, out) row-major.
    if (epilogue_ == gemm_epilogue::bias_gradient && shape_.transpose_b)
      fail("bias_gradient reduces B over k and needs B stored (k, n), not transposed");
  }

  cublasLtEpilogue_t lt_epilogue() const noexcept {
    switch (epilogue_) {
      case gemm_epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
      case gemm_epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
      case gemm_epilogue::relu_bias: return CUBLASLT_EPILOGUE_RELU_BIAS;
      case gemm_epilogue::gelu_bias: return CUBLASLT_EPILOGUE_GELU_BIAS;
      case gemm_epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      // db has one entry per row of cuBLASLt's D (our n) and sums cuBLASLt's A
      // (our B) over k: BGRADA. (BGRADB would sum our A, giving m entries.)
      case gemm_epilogue::bias_gradient: return CUBLASLT_EPILOGUE_BGRADA;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
  }

  void pick_algorithm(std::size_t workspace_limit) {
    const std::vector<candidate> found = candidates(1, workspace_limit);
    if (found.empty()) check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic (no algorithm)");
    use(found.front());
  }

  template <class T>
  void set_desc(cublasLtMatmulDescAttributes_t attribute, const T& value) const {
    check(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)), "cublasLtMatmulDescSetAttribute");
  }
  template <class T>
  void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attribute, const T& value) const {
    check(cublasLtMatmulPreferenceSetAttribute(p, attribute, &value, sizeof(value)),
          "cublasLtMatmulPreferenceSetAttribute");
  }
  void check(cublasStatus_t code, const char* call) const { detail::check_lt(code, call, context_); }

  void require(const void* p, const char* what, std::uint32_t alignment = alignment_bytes) const {
    if (p == nullptr)
      throw std::invalid_argument("typeflow: cuda::matmul::run " + context_ + ": " + what + " is null");
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
      throw std::invalid_argument("typeflow: cuda::matmul::run " + context_ + ": " + what + " is not " +
                                  std::to_string(alignment) + "-byte aligned");
  }

  void release() noexcept {
    if (layout_c_) (void)cublasLtMatrixLayoutDestroy(layout_c_);
    if (layout_b_) (void)cublasLtMatrixLayoutDestroy(layout_b_);
    if (layout_a_) (void)cublasLtMatrixLayoutDestroy(layout_a_);
    if (desc_) (void)cublasLtMatmulDescDestroy(desc_);
    layout_a_ = layout_b_ = layout_c_ = nullptr;
    desc_ = nullptr;
  }

  void steal(matmul& o) noexcept {
    handle_ = o.handle_;
    shape_ = o.shape_;
    precision_ = o.precision_;
    epilogue_ = o.epilogue_;
    output_16bit_ = o.output_16bit_;
    alpha_ = o.alpha_;
    beta_ = o.beta_;
    desc_ = std::exchange(o.desc_, nullptr);
    layout_a_ = std::exchange(o.layout_a_, nullptr);
    layout_b_ = std::exchange(o.layout_b_, nullptr);
    layout_c_ = std::exchange(o.layout_c_, nullptr);
    algorithm_ = o.algorithm_;
    workspace_bytes_ = o.workspace_bytes_;
    aux_ld_ = o.aux_ld_;
    context_ = std::move(o.context_);
  }

  cublasLtHandle_t handle_ = nullptr;
  gemm_shape shape_{};
  gemm_precision precision_ = gemm_precision::float32;
  gemm_epilogue epilogue_ = gemm_epilogue::none;
  bool output_16bit_ = false;
  float alpha_ = 1.f;
  float beta_ = 0.f;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layout_a_ = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t layout_b_ = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t layout_c_ = nullptr;  // C and D
  cublasLtMatmulAlgo_t algorithm_{};
  std::size_t workspace_bytes_ = 0;
  std::int64_t aux_ld_ = 0;
  std::string context_;
};

}  // namespace typeflow::backend::cuda
