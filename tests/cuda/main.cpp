// The CUDA tests' runner: every case needs a device, so without one the whole
// binary skips (exit 77, which ctest reports as "Skipped") and says why.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  std::string why;
  const int devices = typeflow::backend::cuda::device_count(&why);
  const bool listing = context.shouldExit();  // --help, --list-test-cases...
  if (devices == 0 && !listing) {
    std::printf("typeflow_cuda_tests: SKIPPED, no CUDA device (%s). The kernels were compiled for "
                "sm_90; run this binary on a GPU machine (bench/gpu/run.sh) to test them.\n",
                why.c_str());
    return 77;
  }
  if (devices > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
      std::printf("typeflow_cuda_tests: %d device(s); device 0: %s, sm_%d%d, %.1f GiB\n", devices, prop.name,
                  prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  }
  return context.run();
}
