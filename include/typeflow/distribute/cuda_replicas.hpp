// mirrored<N> and multi_worker on GPUs: the replication algorithm's GPU half
// (train/cpu_replicas.hpp is the CPU's), which train/cuda_engine.hpp
// calls around the replicas it holds (one GPU each, with its own arena,
// streams and optimizer state).
//
//   mirrored<N>    N GPUs of one process, NCCL communicators over all of them
//                  (ncclCommInitAll: devices 0 .. N-1);
//   multi_worker   one GPU per process (its local rank's), NCCL bootstrapped
//                  over MPI; rank 0 prints and writes, and its weights are
//                  broadcast to the others before the first step.
// One step: forward and loss on every replica; then backward layer by layer
// from the top, across the replicas, each gradient bucket's NCCL all-reduce
// (the mean) starting on a communication stream as soon as its layers are
// done, while the lower layers' backward runs; then every replica makes the
// same update on the same mean, so the weights stay equal without a
// broadcast. These steps are enqueued eagerly, not captured as one CUDA
// graph: NCCL warns that graphs over several GPUs of one process can
// deadlock. single_device needs none of this and replays one graph.
//
// zero<1|2, S> over either (distribute/zero.hpp): replica (worker) r keeps
// and updates shard r of the optimizer slots alone, its device optimizer
// over that range; the update's statistics, measured per shard, are summed
// over the replicas between its passes (sum_statistics); afterwards each
// shard of the weights goes from its owner to every replica (all_gather).
// zero<2> reduce-scatters each gradient bucket over the shards instead of
// all-reducing it (bucketed_all_reduce::reduce_scatter_over). The gradient
// region stays whole on the GPU: the backward writes all of it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "typeflow/backend/cuda/device_optimizer.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/distribute/bucketed_all_reduce.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/multi_worker.hpp"
#include "typeflow/distribute/replica_seeds.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

template <class Net, class Strategy>
class cuda_replicas {
 public:
  static constexpr int count = Strategy::replicas;  // GPUs in this process
  static constexpr bool across_processes = Strategy::across_processes;
  // Whether a step is enqueued eagerly, NCCL between the replicas' layers,
  // rather than replayed as one captured graph.
  static constexpr bool eager = count > 1 || across_processes;
  static constexpr int stage = zero_stage_v<Strategy>;  // 0: nothing sharded

  // multi_worker: joins the job's NCCL communicator (this process's GPU is
  // its local rank's).
  cuda_replicas() {
    if constexpr (across_processes) worker_ = std::make_unique<backend::cuda::nccl_communicator>(MPI_COMM_WORLD);
    cut_ = shard_bounds(Net::trainable_floats, shards());  // once: the step's all-gather allocates nothing
  }
  cuda_replicas(const cuda_replicas&) = delete;
  cuda_replicas& operator=(const cuda_replicas&) = delete;
  ~cuda_replicas() { all_reduce_.reset(); }  // before the communicators

  // The first replica's GPU: the one asked for, or the local rank's.
  int first_device(int requested) const {
    if constexpr (across_processes)
      return worker_->device();
    else
      return requested;
  }
  // The dropout seed of this process's replica 0: each worker draws its own masks.
  std::uint64_t worker_seed(std::uint64_t seed) const {
    if constexpr (across_processes)
      return distribute::worker_seed(seed, worker_->rank());
    return seed;
  }
  bool is_chief() const {
    if constexpr (across_processes)
      return worker_->rank() == 0;
    else
      return true;
  }

  // mirrored<N>: the communicators over the replicas' GPUs, once the
  // replicas exist.
  void connect(int first_device) {
    if constexpr (count > 1) {
      if (first_device != 0)
        throw std::invalid_argument("mirrored<N> on tf::cuda: the replicas use devices 0 .. N-1 (ncclCommInitAll)");
      nccl_ = std::make_unique<backend::cuda::nccl_communicators>(count);
    }
  }

  // The bucketed all-reduce over the replicas' gradient regions (one per
  // replica, in replica order), set up once per layout of the arenas.
  void prepare(std::span<float* const> gradients) {
    if constexpr (eager) {
      if (all_reduce_) return;
      std::vector<std::size_t> layer_offsets(Net::layer_count);
      for (std::size_t i = 0; i < Net::layer_count; ++i)
        layer_offsets[i] = memory_plan<Net, 0, 0>::layer_gradient_offset[i] / sizeof(float);
      if constexpr (across_processes)
        all_reduce_ = std::make_unique<backend::cuda::bucketed_all_reduce>(
            *worker_, gradients[0], std::span<const std::size_t>(layer_offsets), Net::trainable_floats);
      else
        all_reduce_ = std::make_unique<backend::cuda::bucketed_all_reduce>(
            *nccl_, gradients, std::span<const std::size_t>(layer_offsets), Net::trainable_floats);
      if constexpr (stage >= 2) all_reduce_->reduce_scatter_over(shard_cut());
    }
  }

  // zero<k>: the trainable region's cut into one shard per replica, or per
  // worker (shards + 1 bounds; zero.hpp's shard_bounds); the shards this
  // process holds (every replica's, or its own); and the floats of the
  // longest shard, which each slot of a replica's arena holds.
  const std::vector<std::size_t>& shard_cut() const { return cut_; }
  std::vector<int> held_shards() const {
    std::vector<int> held;
    for (int k = 0; k < count; ++k) held.push_back(shard_of(k));
    return held;
  }
  int shard_of(int replica) const {
    if constexpr (across_processes)
      return worker_->rank();
    else
      return replica;
  }
  std::size_t shard_floats() const { return shard_length(Net::trainable_floats, shards()); }

  // zero<k>: what each replica's optimizer pass measured over its shard
  // becomes the whole region's on every replica: the squared norms summed,
  // all_finite the least (one collective each, on the replicas' streams).
  void sum_statistics(std::span<const backend::cuda::measured_statistics> measured,
                      std::span<const cudaStream_t> streams) {
    std::array<void*, count> norm{}, finite{}, tensors{};
    for (int k = 0; k < count; ++k) {
      norm[k] = &measured[k].statistics->squared_norm;
      finite[k] = &measured[k].statistics->all_finite;
      tensors[k] = measured[k].tensor_squared_norms;
    }
    const std::size_t tensor_count = measured[0].tensors;
    if constexpr (across_processes) {
      worker_->all_reduce(norm[0], 1, ncclDouble, ncclSum, streams[0], "the shards' squared gradient norm");
      worker_->all_reduce(finite[0], 1, ncclInt32, ncclMin, streams[0], "the shards' non-finite verdict");
      worker_->all_reduce(tensors[0], tensor_count, ncclDouble, ncclSum, streams[0],
                          "the shards' per-tensor squared norms");
    } else {
      nccl_->all_reduce(norm.data(), 1, ncclDouble, ncclSum, streams.data(), "the shards' squared gradient norm");
      nccl_->all_reduce(finite.data(), 1, ncclInt32, ncclMin, streams.data(), "the shards' non-finite verdict");
      nccl_->all_reduce(tensors.data(), tensor_count, ncclDouble, ncclSum, streams.data(),
                        "the shards' per-tensor squared norms");
    }
  }
  // zero<k>: each shard of a trainable region (the weights each owner
  // updated; zero<2>'s mean gradient) from its owner to every replica, on
  // the replicas' streams; what names it in an error.
  void all_gather_shards(std::span<float* const> regions, std::span<const cudaStream_t> streams, const char* what) {
    if constexpr (across_processes)
      worker_->all_gather(regions[0], cut_, streams[0], what);
    else
      nccl_->all_gather(regions.data(), cut_, streams.data(), what);
  }
  // The arenas moved (a new batch size, a new compile): prepare again.
  void forget() { all_reduce_.reset(); }

  // The backward of every replica, layer by layer from the top, each layer's
  // gradients handed to the all-reduce once every replica has enqueued them.
  // backward_layer(k, i) enqueues layer i's backward of replica k on
  // streams[k]. Afterwards every replica's gradients hold the mean.
  template <class BackwardLayer>
  void backward_all_reduced(std::span<const cudaStream_t> streams, BackwardLayer&& backward_layer) {
    for (std::size_t i = Net::layer_count; i-- > 0;) {
      for (int k = 0; k < count; ++k) backward_layer(k, i);
      all_reduce_->gradient_ready(i, streams);
    }
    all_reduce_->finish(streams);
  }

  // Waits for a replica's stream; multi_worker: against the job's deadline,
  // so that a dead or stalled worker ends in an error naming the rank.
  void wait(const backend::cuda::stream& s) {
    if constexpr (across_processes)
      worker_->wait(s.get());
    else
      s.synchronize();
  }

  // buffers[k] (on replica k's device) become their mean over every replica
  // of the job: mirrored<N>'s in this process, or across processes the
  // workers', on streams[k]; what names the collective in an error.
  void average(float* const* buffers, std::size_t floats, const cudaStream_t* streams, const char* what) {
    if constexpr (across_processes)
      worker_->all_reduce_mean(buffers[0], floats, streams[0], what);
    else if constexpr (count > 1)
      nccl_->all_reduce_mean(buffers, floats, streams, what);
  }

  // multi_worker: rank 0's weights to every worker, on `s`, waited for.
  // Returns whether the weights there may now differ from this process's
  // host copy (they are rank 0's).
  bool broadcast_weights(float* weights, std::size_t floats, const backend::cuda::stream& s) {
    if constexpr (across_processes) {
      worker_->broadcast(weights, floats, 0, s.get(), "the broadcast of the weights");
      worker_->wait(s.get());
      return true;
    } else {
      (void)weights, (void)floats, (void)s;
      return false;
    }
  }

 private:
  int shards() const {
    if constexpr (across_processes)
      return worker_->size();
    else
      return count;
  }

  std::vector<std::size_t> cut_;  // zero<k>'s shards: shard_cut()
  std::unique_ptr<backend::cuda::nccl_communicator> worker_;  // multi_worker: this process's rank in the job
  std::unique_ptr<backend::cuda::nccl_communicators> nccl_;   // mirrored<N>
  std::unique_ptr<backend::cuda::bucketed_all_reduce> all_reduce_;  // refers to one of the above
};

}  // namespace typeflow
