// nccl_communicator across processes: one GPU per rank, under mpirun. Not
// registered with ctest (the GPU test machine has no MPI launcher); build and
// run it by hand on a machine with MPI and as many GPUs as ranks:
//
//   nvcc -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -Iinclude
//        -I/usr/lib/x86_64-linux-gnu/openmpi/include tests/mpi_cuda/nccl_multi_worker_main.cu
//        -o /tmp/nccl_mw -L/usr/local/cuda/lib -lnccl -lmpi       (one command line)
//   mpirun -np 2 /tmp/nccl_mw          # every rank prints "all checks passed"; exit 0
//   TYPEFLOW_WORKER_TIMEOUT=5 mpirun -np 2 /tmp/nccl_mw stall
//       # rank 1 never joins the all-reduce: rank 0 must print its timeout
//       # ("rank 0 of 2 (device 0) waited 5 s for [NCCL to start] the gradient
//       # all-reduce") and the job must stop, non-zero (rank 0 is marked failed,
//       # so its exit aborts the job), within about 10 s instead of hanging.
//
// Checks: all_reduce_mean gives the mean over the ranks; broadcast copies the
// root; the bucketed all-reduce, eager and replayed from a captured graph,
// gives the same mean; every rank gets the same bits.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "typeflow/distribute/bucketed_all_reduce.hpp"
#include "typeflow/distribute/multi_worker.hpp"

namespace cu = typeflow::backend::cuda;

namespace {

__host__ __device__ float value(int rank, std::size_t i, int step) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13 +
                                              static_cast<std::size_t>(step) * 5) % 97) - 48);
}

__global__ void fill(float* x, std::size_t begin, std::size_t end, int rank, int step) {
  for (std::size_t i = begin + blockIdx.x * blockDim.x + threadIdx.x; i < end;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = value(rank, i, step);
}

int failures = 0;

void check(bool ok, int rank, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "nccl_multi_worker: rank %d: FAILED: %s\n", rank, what.c_str());
  }
}

// How many elements differ from the mean over the ranks.
std::size_t wrong_means(const std::vector<float>& got, int ranks, int step) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += value(r, i, step);
    const double want = sum / ranks;
    wrong += std::fabs(got[i] - want) > 1e-5 * std::fmax(1.0, std::fabs(want));
  }
  return wrong;
}

std::vector<float> to_host(const float* d, std::size_t n) {
  std::vector<float> h(n);
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// Every rank holds the same bits as rank 0.
bool same_bits_everywhere(const std::vector<float>& mine) {
  std::vector<float> root(mine);
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  return std::memcmp(root.data(), mine.data(), mine.size() * sizeof(float)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool stall = argc > 1 && std::strcmp(argv[1], "stall") == 0;
  cu::nccl_communicator comm;  // starts MPI; one GPU per rank
  const int rank = comm.rank();
  const int ranks = comm.size();
  std::printf("nccl_multi_worker: rank %d of %d on device %d (local rank %d)\n", rank, ranks, comm.device(),
              comm.local_rank());
  cu::stream s;

  // Layers of 3000, 17, 0, 5000, 1200, 20000, 64, 0, 999, 2500 floats; 16 KiB buckets.
  const std::vector<std::size_t> sizes{3000, 17, 0, 5000, 1200, 20000, 64, 0, 999, 2500};
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for (const std::size_t n : sizes) {
    offsets.push_back(total);
    total += n;
  }
  cu::device_buffer gradients(total * sizeof(float));
  float* g = gradients.data<float>();

  if (stall) {
    if (rank == 1) {  // never joins: a worker that has died or hangs
      std::this_thread::sleep_for(4 * comm.timeout());
      return 0;
    }
    fill<<<cu::blocks_for(total, 256), 256, 0, s.get()>>>(g, 0, total, rank, 0);
    try {  // the deadline can pass in either: NCCL may connect lazily, at the first collective
      comm.all_reduce_mean(g, total, s.get());
      comm.wait(s.get());
      std::fprintf(stderr, "nccl_multi_worker: rank %d: FAILED: the all-reduce completed without rank 1\n", rank);
      return 1;
    } catch (const cu::nccl_error& e) {
      std::fprintf(stderr, "nccl_multi_worker: rank %d gave up as expected: %s\n", rank, e.what());
      return 0;  // the process is marked failed: at exit the job is aborted (MPI_Abort)
    }
  }

  // One all-reduce of the whole region.
  fill<<<cu::blocks_for(total, 256), 256, 0, s.get()>>>(g, 0, total, rank, 1);
  comm.all_reduce_mean(g, total, s.get());
  comm.wait(s.get());
  const auto once = to_host(g, total);
  check(wrong_means(once, ranks, 1) == 0, rank, "all_reduce_mean is not the mean over the ranks");
  check(same_bits_everywhere(once), rank, "the ranks disagree after all_reduce_mean");

  // Broadcast from the last rank.
  fill<<<cu::blocks_for(total, 256), 256, 0, s.get()>>>(g, 0, total, rank, 2);
  comm.broadcast(g, total, ranks - 1, s.get());
  comm.wait(s.get());
  const auto copied = to_host(g, total);
  std::size_t not_root = 0;
  for (std::size_t i = 0; i < total; ++i) not_root += copied[i] != value(ranks - 1, i, 2);
  check(not_root == 0, rank, "broadcast did not copy the root's values");

  // Bucketed, overlapped with a stand-in backward pass: eager, then a graph.
  cu::bucketed_all_reduce all_reduce(comm, g, offsets, total, 4096 * sizeof(float));
  auto backward = [&](cudaStream_t stream, int step) {
    for (std::size_t l = sizes.size(); l-- > 0;) {
      if (sizes[l] > 0)
        fill<<<cu::blocks_for(sizes[l], 256), 256, 0, stream>>>(g, offsets[l], offsets[l] + sizes[l], rank, step);
      all_reduce.gradient_ready(l, stream);
    }
    all_reduce.finish(stream);
  };
  backward(s.get(), 1);
  comm.wait(s.get());
  const auto bucketed = to_host(g, total);
  check(wrong_means(bucketed, ranks, 1) == 0, rank, "the bucketed all-reduce is not the mean over the ranks");
  check(same_bits_everywhere(bucketed), rank, "the ranks disagree after the bucketed all-reduce");
  {
    cu::graph step;
    step.capture(s.get(), [&](cudaStream_t captured) { backward(captured, 3); });
    for (int launch = 0; launch < 3; ++launch) {
      TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(g, 0x7f, total * sizeof(float), s.get()));
      step.launch(s.get());
      comm.wait(s.get());
      const auto replayed = to_host(g, total);
      check(wrong_means(replayed, ranks, 3) == 0, rank,
            "the captured bucketed all-reduce is not the mean (launch " + std::to_string(launch) + ")");
    }
  }  // the graph goes before the communicator

  if (failures == 0) std::printf("nccl_multi_worker: rank %d: all checks passed\n", rank);
  return failures == 0 ? 0 : 1;
}
