// mirrored<N>: N data-parallel replicas of one model on one machine.
//
// The global batch from the pipeline is split into N equal shards; each
// replica (its own copy of the weights, its own activations) runs forward and
// backward on its shard in its own thread, with the cores divided among them.
// The gradients are then all-reduced to their mean, summed in replica order
// element by element, so the result never depends on thread timing; the
// optimizer updates once and the new weights are copied to every replica.
//
// batch_norm's moving statistics are kept per replica (evaluate, predict and
// save use replica 0's). mirrored<N, sync_batch_norm_statistics> averages
// them across the replicas after every optimizer update instead (every K
// steps under accumulate<K>; in a last partial batch weighed by each
// replica's valid samples). (This synchronises the
// moving statistics, not the batch statistics inside a step.)
//
// The algorithm on the CPU is train/cpu_replicas.hpp; on GPUs (one GPU
// per replica, NCCL) distribute/cuda_replicas.hpp.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "typeflow/distribute/strategy.hpp"

namespace typeflow {

struct sync_batch_norm_statistics {};

template <int N, class... Options>
struct mirrored : distribute::one_process {
  static_assert(N >= 1, "mirrored<N>: N, the number of replicas, must be at least 1");
  static constexpr int replicas = N;
  static constexpr bool sync_statistics = (std::is_same_v<Options, sync_batch_norm_statistics> || ...);
  // "mirrored<2>" or "mirrored<2, sync_batch_norm_statistics>", as checkpoints record it.
  static std::string name() {
    return "mirrored<" + std::to_string(N) + (sync_statistics ? ", sync_batch_norm_statistics>" : ">");
  }
};

// A check whose name carries the facts, for the batch-split rule.
template <class Strategy, class GlobalBatch, bool Ok>
struct strategy_check {
  static constexpr bool passed = Ok;
};
template <int Batch>
struct global_batch {};

// Runs one job per replica: replica 0 on the calling thread, the others on
// threads that live as long as the pool. Waking them allocates nothing.
class replica_pool {
 public:
  using job = void (*)(void* context, int replica);

  replica_pool(int replicas, int threads_per_replica) : threads_per_replica_(threads_per_replica) {
    for (int r = 1; r < replicas; ++r) workers_.emplace_back([this, r] { work(r); });
  }
  replica_pool(const replica_pool&) = delete;
  replica_pool& operator=(const replica_pool&) = delete;
  ~replica_pool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int threads_per_replica() const { return threads_per_replica_; }

  // job(context, r) for every replica; returns when all are done, rethrowing
  // the first exception a replica threw.
  void run(job f, void* context) {
    {
      std::lock_guard lock(mutex_);
      job_ = f;
      context_ = context;
      pending_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    const int outer = omp_get_max_threads();
    omp_set_num_threads(threads_per_replica_);
    std::exception_ptr own;
    try {
      f(context, 0);
    } catch (...) {
      own = std::current_exception();
    }
    omp_set_num_threads(outer);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    if (own) std::rethrow_exception(own);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(int replica) {
    omp_set_num_threads(threads_per_replica_);
    unsigned long seen = 0;
    for (;;) {
      job f;
      void* context;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        f = job_;
        context = context_;
      }
      std::exception_ptr failure;
      try {
        f(context, replica);
      } catch (...) {
        failure = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        if (failure && !error_) error_ = std::move(failure);  // the caller holds the last reference
        --pending_;
      }
      done_.notify_one();
    }
  }

  int threads_per_replica_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  job job_ = nullptr;
  void* context_ = nullptr;
  int pending_ = 0;
  unsigned long generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace typeflow
