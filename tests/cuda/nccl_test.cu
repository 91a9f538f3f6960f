// NCCL on real devices: the mirrored<N> all-reduce and broadcast, the bucketed
// all-reduce eagerly and inside a captured graph, and the one-rank-per-process
// communicator (as the only rank, from an NCCL id made here: no MPI, which the
// GPU test machine lacks) with its deadline.
// Cases that need two devices say so and pass on a one-GPU machine; the
// bucketed cases and zero<k>'s collectives (reduce-scatter, all-gather, the
// shards' statistics) also run with one device, which checks the calls, the
// stream/event plumbing and the capture but not the reduction across devices.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "typeflow/distribute/bucketed_all_reduce.hpp"
#include "typeflow/distribute/zero.hpp"

namespace cu = typeflow::backend::cuda;
namespace td = typeflow::distribute;

namespace {

// Small integers: sums over the replicas are exact, and so is the mean over a
// power-of-two number of them.
__host__ __device__ float gradient_value(int replica, std::size_t i, int step) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(replica) * 13 +
                                              static_cast<std::size_t>(step) * 5) % 97) - 48);
}

// Stands in for one layer's backward: writes its gradients [begin, end).
__global__ void fill_layer(float* gradients, std::size_t begin, std::size_t end, int replica, int step) {
  for (std::size_t i = begin + blockIdx.x * blockDim.x + threadIdx.x; i < end;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    gradients[i] = gradient_value(replica, i, step);
}

// Holds its stream until the host sets *flag (or ~10 s pass, so that a broken
// test cannot hang the run).
__global__ void spin_until(const volatile int* flag) {
  for (long long i = 0; i < 10'000'000 && *flag == 0; ++i) __nanosleep(1000);
}

bool close_to(float got, double want) { return std::fabs(got - want) <= 1e-5 * std::fmax(1.0, std::fabs(want)); }

// How many of got[i] differ from the mean over `replicas` of gradient_value(·, i, step).
std::size_t wrong_means(const std::vector<float>& got, int replicas, int step) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < replicas; ++r) sum += gradient_value(r, i, step);
    wrong += !close_to(got[i], sum / replicas);
  }
  return wrong;
}

std::vector<float> to_host(const float* device_data, std::size_t count) {
  std::vector<float> host(count);
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(host.data(), device_data, count * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

// Layers of a small network, in floats: an empty one (an activation), one
// larger than a bucket, buckets of several layers.
const std::vector<std::size_t> layer_sizes{3000, 17, 0, 5000, 1200, 20000, 64, 0, 999, 2500};
constexpr std::size_t bucket_bytes = 4096 * sizeof(float);

std::vector<std::size_t> layer_offsets() {
  std::vector<std::size_t> offsets;
  std::size_t at = 0;
  for (const std::size_t s : layer_sizes) {
    offsets.push_back(at);
    at += s;
  }
  return offsets;
}

std::size_t total_floats() {
  std::size_t t = 0;
  for (const std::size_t s : layer_sizes) t += s;
  return t;
}

// Per replica: its device, gradient region and compute stream.
struct replica_state {
  int device;
  cu::device_buffer gradients;
  cu::stream compute;
};

std::vector<replica_state> make_replicas(const std::vector<int>& devices, std::size_t floats) {
  std::vector<replica_state> replicas;
  for (const int d : devices) {
    const cu::device_guard on(d);
    replicas.push_back({d, cu::device_buffer(floats * sizeof(float)), cu::stream()});
  }
  return replicas;
}

// The backward pass of one step: layers last to first, each reported ready
// once every replica's kernel for it is enqueued.
void backward(std::vector<replica_state>& replicas, cu::bucketed_all_reduce& all_reduce, int step,
              const std::vector<cudaStream_t>& streams) {
  const auto offsets = layer_offsets();
  for (std::size_t l = layer_sizes.size(); l-- > 0;) {
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      const cu::device_guard on(replicas[r].device);
      const std::size_t n = layer_sizes[l];
      if (n == 0) continue;
      fill_layer<<<cu::blocks_for(n, 256), 256, 0, streams[r]>>>(replicas[r].gradients.data<float>(), offsets[l],
                                                                  offsets[l] + n, static_cast<int>(r), step);
      TYPEFLOW_CUDA_CHECK_LAUNCH();
    }
    all_reduce.gradient_ready(l, streams);
  }
  all_reduce.finish(streams);
}

// nccl_communicator as the only rank, without MPI (tests/mpi_cuda checks the
// MPI set-up with several ranks).
cu::nccl_communicator only_rank() {
  ncclUniqueId id;
  TYPEFLOW_NCCL_CHECK(ncclGetUniqueId(&id));
  return cu::nccl_communicator(id, /*rank=*/0, /*size=*/1, /*device=*/0);
}

}  // namespace

TEST_CASE("nccl: mirrored all_reduce_mean over N devices equals the host mean, and broadcast copies the root") {
  const int n = cu::device_count();
  if (n < 2) {
    MESSAGE("skipped: needs 2 or more CUDA devices, found " << n);
    return;
  }
  cu::nccl_communicators comms(n);
  REQUIRE(comms.size() == n);
  constexpr std::size_t count = (std::size_t{1} << 20) + 3;  // odd: not a multiple of any chunk
  std::vector<int> devices(n);
  for (int r = 0; r < n; ++r) devices[r] = r;
  auto replicas = make_replicas(devices, count);
  std::vector<float*> buffers;
  std::vector<cudaStream_t> streams;
  for (int r = 0; r < n; ++r) {
    const cu::device_guard on(r);
    buffers.push_back(replicas[r].gradients.data<float>());
    streams.push_back(replicas[r].compute.get());
    fill_layer<<<cu::blocks_for(count, 256), 256, 0, streams[r]>>>(buffers[r], 0, count, r, 0);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  }
  comms.all_reduce_mean(buffers.data(), count, streams.data());
  for (auto& rep : replicas) rep.compute.synchronize();
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(wrong_means(to_host(buffers[r], count), n, 0) == 0);
  }

  // Broadcast from the last replica after giving every replica its own values.
  for (int r = 0; r < n; ++r) {
    const cu::device_guard on(r);
    fill_layer<<<cu::blocks_for(count, 256), 256, 0, streams[r]>>>(buffers[r], 0, count, r, 1);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  }
  comms.broadcast(buffers.data(), count, n - 1, streams.data());
  for (auto& rep : replicas) rep.compute.synchronize();
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto got = to_host(buffers[r], count);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += got[i] != gradient_value(n - 1, i, 1);
    CHECK(wrong == 0);
  }
  CHECK_THROWS_AS(comms.broadcast(buffers.data(), count, n, streams.data()), std::out_of_range);
}

TEST_CASE("nccl: the bucket plan of the test network (host logic, also tested on the CPU)") {
  const auto offsets = layer_offsets();
  const auto buckets = td::plan_buckets(offsets, total_floats(), bucket_bytes / sizeof(float));
  // From the last layer: {64, 0, 999, 2500} = 3563 fits (20000 would overflow); 20000 alone;
  // {1200} (5000 would overflow); {0, 5000} (17 would overflow); {3000, 17}.
  REQUIRE(buckets.size() == 5);
  CHECK(buckets[0] == td::gradient_bucket{.first_layer = 6, .end_layer = 10, .offset = 29217, .count = 3563});
  CHECK(buckets[1] == td::gradient_bucket{.first_layer = 5, .end_layer = 6, .offset = 9217, .count = 20000});
  CHECK(buckets[2] == td::gradient_bucket{.first_layer = 4, .end_layer = 5, .offset = 8017, .count = 1200});
  CHECK(buckets[3] == td::gradient_bucket{.first_layer = 2, .end_layer = 4, .offset = 3017, .count = 5000});
  CHECK(buckets[4] == td::gradient_bucket{.first_layer = 0, .end_layer = 2, .offset = 0, .count = 3017});
}

TEST_CASE("nccl: mirrored bucketed all-reduce, eager and in a captured graph, equals one all-reduce") {
  const int n = cu::device_count();
  if (n < 2) MESSAGE("one device: checks the streams, events and capture, not a reduction across devices");
  const std::size_t total = total_floats();
  cu::nccl_communicators comms(n);
  std::vector<int> devices(n);
  for (int r = 0; r < n; ++r) devices[r] = r;
  auto replicas = make_replicas(devices, total);
  std::vector<float*> gradients;
  std::vector<cudaStream_t> streams;
  for (auto& rep : replicas) {
    gradients.push_back(rep.gradients.data<float>());
    streams.push_back(rep.compute.get());
  }
  const auto offsets = layer_offsets();

  // The reference: every layer written, then one all-reduce of the whole region.
  auto reference = [&](int step) {
    for (int r = 0; r < n; ++r) {
      const cu::device_guard on(r);
      fill_layer<<<cu::blocks_for(total, 256), 256, 0, streams[r]>>>(gradients[r], 0, total, r, step);
      TYPEFLOW_CUDA_CHECK_LAUNCH();
    }
    comms.all_reduce_mean(gradients.data(), total, streams.data());
    for (auto& rep : replicas) rep.compute.synchronize();
    std::vector<std::vector<float>> out;
    for (int r = 0; r < n; ++r) out.push_back(to_host(gradients[r], total));
    return out;
  };
  auto check_against = [&](const std::vector<std::vector<float>>& want, int step) {
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto got = to_host(gradients[r], total);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < total; ++i) differ += !close_to(got[i], want[r][i]);
      CHECK(differ == 0);
      CHECK(wrong_means(got, n, step) == 0);
    }
  };
  auto scribble = [&] {  // garbage in the gradients, so that a step that did nothing shows
    for (int r = 0; r < n; ++r) {
      const cu::device_guard on(r);
      TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(gradients[r], 0x7f, total * sizeof(float), streams[r]));
    }
    for (auto& rep : replicas) rep.compute.synchronize();
  };
  const auto want1 = reference(1);
  const auto want2 = reference(2);
  const auto want3 = reference(3);

  cu::bucketed_all_reduce all_reduce(comms, gradients, offsets, total, bucket_bytes);
  CHECK(all_reduce.replicas() == n);
  CHECK(all_reduce.buckets().size() == 5);

  // Eager, two steps with the same object.
  for (const int step : {1, 2}) {
    CAPTURE(step);
    scribble();
    backward(replicas, all_reduce, step, streams);
    for (auto& rep : replicas) rep.compute.synchronize();
    check_against(step == 1 ? want1 : want2, step);
  }

  // Captured: one graph over every device. Replica 0's stream is the origin;
  // the others are forked from it and joined back.
  // An event belongs to one device and is recorded on its streams only: the
  // forks are recorded on the origin (device 0), each join on its replica's stream.
  std::vector<cu::event> forks, joins;
  for (int r = 0; r < n; ++r) {
    {
      const cu::device_guard on(0);
      forks.emplace_back();
    }
    const cu::device_guard on(r);
    joins.emplace_back();
  }
  {
    cu::graph step_graph;  // destroyed before the communicators (declared after them)
    step_graph.capture(streams[0], [&](cudaStream_t origin) {
      for (int r = 1; r < n; ++r) {
        {
          const cu::device_guard on(0);
          forks[r].record(origin);
        }
        forks[r].wait_on(streams[r]);
      }
      backward(replicas, all_reduce, 3, streams);
      for (int r = 1; r < n; ++r) {
        const cu::device_guard on(r);
        joins[r].record(streams[r]);
        joins[r].wait_on(origin);
      }
    });
    REQUIRE(step_graph.captured());
    for (int launch = 0; launch < 2; ++launch) {
      CAPTURE(launch);
      scribble();
      {
        const cu::device_guard on(0);
        step_graph.launch(streams[0]);
        replicas[0].compute.synchronize();  // the joins make stream 0 wait for every device
      }
      check_against(want3, 3);
    }
  }

  // The object still works eagerly after the capture.
  scribble();
  backward(replicas, all_reduce, 1, streams);
  for (auto& rep : replicas) rep.compute.synchronize();
  check_against(want1, 1);

  // Misuse is refused.
  CHECK_THROWS_AS(all_reduce.gradient_ready(layer_sizes.size(), streams), std::out_of_range);
  all_reduce.gradient_ready(0, streams);
  CHECK_THROWS_AS(all_reduce.gradient_ready(0, streams), std::logic_error);
  all_reduce.finish(streams);
  for (auto& rep : replicas) rep.compute.synchronize();
  if (n > 1) {
    const std::vector<cudaStream_t> one{streams[0]};
    CHECK_THROWS_AS(all_reduce.finish(one), std::invalid_argument);
  }
}

// One rank per process, as the only rank: NCCL's nonblocking set-up and every
// call path on one GPU. Several ranks, and the set-up over MPI, are checked by
// tests/mpi_cuda/nccl_multi_worker_main.cu under mpirun.
TEST_CASE("nccl: a one-rank nccl_communicator all-reduces, broadcasts, waits, and runs the bucketed all-reduce") {
  auto comm = only_rank();
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.device() == 0);
  CHECK(!comm.aborted());
  const std::size_t total = total_floats();
  auto replicas = make_replicas({comm.device()}, total);
  float* gradients = replicas[0].gradients.data<float>();
  const cudaStream_t compute = replicas[0].compute.get();
  const std::vector<cudaStream_t> streams{compute};

  fill_layer<<<cu::blocks_for(total, 256), 256, 0, compute>>>(gradients, 0, total, 0, 4);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  comm.all_reduce_mean(gradients, total, compute);
  comm.broadcast(gradients, total, 0, compute);
  comm.wait(compute);
  CHECK(wrong_means(to_host(gradients, total), 1, 4) == 0);
  CHECK_THROWS_AS(comm.broadcast(gradients, total, 1, compute), std::out_of_range);

  cu::bucketed_all_reduce all_reduce(comm, gradients, layer_offsets(), total, bucket_bytes);
  CHECK(all_reduce.replicas() == 1);
  TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(gradients, 0x7f, total * sizeof(float), compute));
  backward(replicas, all_reduce, 5, streams);
  comm.wait(compute);
  CHECK(wrong_means(to_host(gradients, total), 1, 5) == 0);

  cu::graph step_graph;
  step_graph.capture(compute, [&](cudaStream_t) { backward(replicas, all_reduce, 6, streams); });
  for (int launch = 0; launch < 2; ++launch) {
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(gradients, 0x7f, total * sizeof(float), compute));
    step_graph.launch(compute);
    comm.wait(compute);
    CHECK(wrong_means(to_host(gradients, total), 1, 6) == 0);
  }

  // wait() on a capturing stream is refused (cudaStreamQuery would break the capture).
  cu::graph refused;
  CHECK_THROWS_AS(refused.capture(compute, [&](cudaStream_t s) { comm.wait(s); }), std::logic_error);
  CHECK(!comm.aborted());
  step_graph.reset();  // graphs go before their communicator
}

TEST_CASE("nccl: nccl_communicator::wait gives up at its deadline, aborts, and names the rank") {
  auto comm = only_rank();
  cu::stream s;
  cu::pinned_buffer flag(sizeof(int));  // mapped into the device's address space (unified addressing)
  std::atomic_ref<int> release(*flag.data<int>());
  release.store(0);
  spin_until<<<1, 1, 0, s.get()>>>(flag.data<int>());  // a collective that never completes
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  // Released well after the deadline, from another thread: ncclCommAbort frees
  // device memory, and cudaFree may wait for the device to go idle.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    release.store(1);
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.wait(s.get(), std::chrono::milliseconds(300), "the test's stalled collective");
    FAIL("wait returned although the stream was held");
  } catch (const cu::nccl_error& e) {
    const std::string what = e.what();
    CHECK(e.timed_out());
    CHECK(what.find("rank 0 of 1") != std::string::npos);
    CHECK(what.find("waited 0.3 s for the test's stalled collective") != std::string::npos);
    CHECK(what.find("aborted") != std::string::npos);
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(300));
  CHECK(waited < std::chrono::seconds(8));
  releaser.join();
  CHECK(comm.aborted());
  float* nothing = nullptr;
  CHECK_THROWS_WITH_AS(comm.all_reduce_mean(nothing, 1, s.get()), doctest::Contains("aborted earlier"), cu::nccl_error);
  s.synchronize();
}

namespace {
// The shard of the cut that holds element i.
int owner_of(const std::vector<std::size_t>& cut, std::size_t i) {
  for (std::size_t o = 0; o + 1 < cut.size(); ++o)
    if (i >= cut[o] && i < cut[o + 1]) return static_cast<int>(o);
  return -1;
}
}  // namespace

TEST_CASE("nccl: zero<k>'s reduce-scatter, all-gather and statistics, over every device and over one rank") {
  const int n = cu::device_count();
  const std::size_t count = total_floats();
  const std::vector<std::size_t> cut = typeflow::shard_bounds(count, n);
  std::vector<int> devices(static_cast<std::size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  cu::nccl_communicators comms(n);
  auto replicas = make_replicas(devices, count);
  std::vector<float*> buffers;
  std::vector<cudaStream_t> streams;
  for (int r = 0; r < n; ++r) {
    const cu::device_guard on(r);
    buffers.push_back(replicas[r].gradients.data<float>());
    streams.push_back(replicas[r].compute.get());
    fill_layer<<<cu::blocks_for(count, 256), 256, 0, streams[r]>>>(buffers[r], 0, count, r, 7);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  }
  // A part of the buffers reduce-scattered: inside it each replica's shard
  // holds the mean, and every other element the replica's own value.
  const std::size_t offset = 1000, part = count / 2;
  comms.reduce_scatter_mean(buffers.data(), offset, part, cut, streams.data(), "the test's reduce-scatter");
  for (auto& rep : replicas) rep.compute.synchronize();
  const auto after_scatter = [&](int r, std::size_t i) {
    const bool reduced = i >= offset && i < offset + part && owner_of(cut, i) == r;
    if (!reduced) return static_cast<double>(gradient_value(r, i, 7));
    double sum = 0;
    for (int q = 0; q < n; ++q) sum += gradient_value(q, i, 7);
    return sum / n;
  };
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto got = to_host(buffers[r], count);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += !close_to(got[i], after_scatter(r, i));
    CHECK(wrong == 0);
  }
  // The all-gather: every replica holds each shard's owner's values.
  comms.all_gather(buffers.data(), cut, streams.data(), "the test's all-gather");
  for (auto& rep : replicas) rep.compute.synchronize();
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto got = to_host(buffers[r], count);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) wrong += !close_to(got[i], after_scatter(owner_of(cut, i), i));
    CHECK(wrong == 0);
  }
  // The shards' statistics: a double summed, an int's least.
  std::vector<cu::device_buffer> sums, verdicts;
  std::vector<void*> sum_pointers, verdict_pointers;
  for (int r = 0; r < n; ++r) {
    const cu::device_guard on(r);
    const double value = r + 1.5;
    const std::int32_t verdict = r == n - 1 ? 0 : 1;
    sums.emplace_back(sizeof(double));
    verdicts.emplace_back(sizeof(std::int32_t));
    cu::copy_to_device(sums.back().data(), &value, sizeof value);
    cu::copy_to_device(verdicts.back().data(), &verdict, sizeof verdict);
    sum_pointers.push_back(sums.back().data());
    verdict_pointers.push_back(verdicts.back().data());
  }
  comms.all_reduce(sum_pointers.data(), 1, ncclDouble, ncclSum, streams.data(), "the test's sum");
  comms.all_reduce(verdict_pointers.data(), 1, ncclInt32, ncclMin, streams.data(), "the test's least");
  for (auto& rep : replicas) rep.compute.synchronize();
  const double expected_sum = n * 1.5 + n * (n - 1) / 2.0;
  for (int r = 0; r < n; ++r) {
    double sum = 0;
    std::int32_t verdict = 1;
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(&sum, sum_pointers[r], sizeof sum, cudaMemcpyDeviceToHost));
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(&verdict, verdict_pointers[r], sizeof verdict, cudaMemcpyDeviceToHost));
    CHECK(sum == expected_sum);
    CHECK(verdict == 0);
  }
  // The bucketed backward reduce-scattering each bucket over the cut.
  {
    cu::bucketed_all_reduce scatter(comms, buffers, layer_offsets(), count, bucket_bytes);
    scatter.reduce_scatter_over(cut);
    backward(replicas, scatter, 8, streams);
    for (auto& rep : replicas) rep.compute.synchronize();
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      const auto got = to_host(buffers[r], count);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        double want = gradient_value(r, i, 8);
        if (owner_of(cut, i) == r) {
          double sum = 0;
          for (int q = 0; q < n; ++q) sum += gradient_value(q, i, 8);
          want = sum / n;
        }
        wrong += !close_to(got[i], want);
      }
      CHECK(wrong == 0);
    }
  }
  CHECK_THROWS_AS(comms.all_gather(buffers.data(), std::vector<std::size_t>{0, count, count, count, count, count,
                                                                             count, count, count, count},
                                   streams.data(), "a cut of another size"),
                  std::invalid_argument);

  // The one-rank communicator's: the calls run, and one rank's mean is its own.
  auto comm = only_rank();
  auto single = make_replicas({comm.device()}, count);
  float* own = single[0].gradients.data<float>();
  const cudaStream_t compute = single[0].compute.get();
  const std::vector<std::size_t> whole{0, count};
  fill_layer<<<cu::blocks_for(count, 256), 256, 0, compute>>>(own, 0, count, 0, 9);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  comm.reduce_scatter_mean(own, offset, part, whole, compute);
  comm.all_gather(own, whole, compute);
  comm.all_reduce(sum_pointers[0], 1, ncclDouble, ncclSum, compute, "the test's sum");
  comm.wait(compute);
  CHECK(wrong_means(to_host(own, count), 1, 9) == 0);
  double sum = 0;
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(&sum, sum_pointers[0], sizeof sum, cudaMemcpyDeviceToHost));
  CHECK(sum == expected_sum);
  cu::bucketed_all_reduce scatter(comm, own, layer_offsets(), count, bucket_bytes);
  scatter.reduce_scatter_over(whole);
  backward(single, scatter, 10, {compute});
  comm.wait(compute);
  CHECK(wrong_means(to_host(own, count), 1, 10) == 0);
  CHECK_THROWS_AS(comm.all_gather(own, std::vector<std::size_t>{0, 1, count}, compute), std::invalid_argument);
}
