// Whether a 16-bit compute dtype's matrix products run as oneDNN bfloat16
// primitives on this CPU, or emulated in float32.
//
//   products_16bit::automatic   bfloat16 products where oneDNN has a native
//                               implementation (AVX512-BF16 or AMX: vdpbf16ps
//                               runs them at about twice float32's rate),
//                               emulated elsewhere (AVX2)
//   products_16bit::emulated    always emulated: the operands are rounded to
//                               16 bits and held in float32 (precision/storage.hpp)
//
// Both give a 16-bit product with float32 accumulation: the values differ
// only by the order of the sums. float16 is always emulated (oneDNN 2.6 has
// no float16 matmul on CPUs without AVX512-FP16).
//
// The choice is process-wide and read when a model sets itself up for a batch
// size (its first compile/fit/predict at that size); the environment variable
// TYPEFLOW_CPU_16BIT_PRODUCTS=emulated gives the same without recompiling.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

namespace typeflow::backend::cpu {

enum class products_16bit { automatic, emulated };

inline std::atomic<products_16bit>& products_16bit_setting() {
  static std::atomic<products_16bit> setting{products_16bit::automatic};
  return setting;
}

// oneDNN's choice for a small bfloat16 product: native when it names the
// bf16 or AMX instructions (a reference or emulating kernel would be slower
// than float32).
inline bool probe_native_bf16_matmul() {
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc a({64, 64}, dt::bf16, tag::ab), b({64, 64}, dt::bf16, tag::ab),
        c({64, 64}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine);
    const std::string impl = pd.impl_info_str();
    return impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

inline void set_products_16bit(products_16bit choice) { products_16bit_setting() = choice; }

// True where oneDNN runs bfloat16 products natively on this CPU.
inline bool bf16_products_available() {
  static const bool available = probe_native_bf16_matmul();
  return available;
}

// What a model set up now uses for bfloat16 products.
inline bool native_bf16_products() {
  if (products_16bit_setting() == products_16bit::emulated) return false;
  if (const char* env = std::getenv("TYPEFLOW_CPU_16BIT_PRODUCTS"); env && std::strcmp(env, "emulated") == 0)
    return false;
  return bf16_products_available();
}

}  // namespace typeflow::backend::cpu
