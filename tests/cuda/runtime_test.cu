// The runtime wrappers on a real device: copies, streams, events, graphs.
#include <doctest/doctest.h>

#include <vector>

#include "typeflow/backend/cuda/runtime.hpp"

namespace cu = typeflow::backend::cuda;

namespace {
__global__ void add_one(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.f;
}
}  // namespace

TEST_CASE("cuda runtime: a device buffer round-trips through pinned memory on a stream") {
  constexpr int n = 1000;
  cu::stream s;
  cu::device_buffer device(n * sizeof(float));
  cu::pinned_buffer host(n * sizeof(float));
  for (int i = 0; i < n; ++i) host.data<float>()[i] = static_cast<float>(i);
  TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s.get()));
  add_one<<<cu::blocks_for(n, 256), 256, 0, s.get()>>>(device.data<float>(), n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(host.data(), device.data(), n * sizeof(float), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  for (int i = 0; i < n; ++i) REQUIRE(host.data<float>()[i] == static_cast<float>(i + 1));
}

TEST_CASE("cuda runtime: a captured graph replays its kernels each launch, and runs none while captured") {
  constexpr int n = 4096;
  cu::stream s;
  cu::device_buffer device(n * sizeof(float));
  TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(device.data(), 0, n * sizeof(float), s.get()));
  s.synchronize();
  cu::graph g;
  g.capture(s.get(), [&](cudaStream_t cs) {
    add_one<<<cu::blocks_for(n, 256), 256, 0, cs>>>(device.data<float>(), n);
    add_one<<<cu::blocks_for(n, 256), 256, 0, cs>>>(device.data<float>(), n);
  });
  std::vector<float> out(n);
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(out.data(), device.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(out[7] == 0.f);  // capture records, it does not run
  for (int launch = 0; launch < 3; ++launch) g.launch(s.get());
  s.synchronize();
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(out.data(), device.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  for (float v : out) REQUIRE(v == 6.f);
}

TEST_CASE("cuda runtime: errors name the call and the place") {
  cu::device_buffer too_big;
  try {
    too_big = cu::device_buffer(std::size_t{1} << 60);
    FAIL("a 2^60-byte cudaMalloc succeeded");
  } catch (const cu::cuda_error& e) {
    const std::string what = e.what();
    CHECK(what.find("cudaMalloc") != std::string::npos);
    CHECK(what.find("runtime.hpp") != std::string::npos);
    CHECK(e.code() == cudaErrorMemoryAllocation);
  }
  // The failed call leaves the device usable.
  cu::device_buffer fine(1024);
  CHECK(fine.data() != nullptr);
}

TEST_CASE("cuda runtime: require_devices names what needed them") {
  const int found = cu::device_count();
  CHECK_THROWS_WITH_AS(cu::require_devices(found + 1, "mirrored<N>"),
                       doctest::Contains("mirrored<N> needs"), std::runtime_error);
  CHECK_NOTHROW(cu::require_devices(found, "one replica"));
}
