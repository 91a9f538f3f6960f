// The gradient all-reduce overlapped with the backward pass, over either
// NCCL communicator (distribute/nccl.hpp has the overview and the capture
// rules).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/distribute/bucket_plan.hpp"
#include "typeflow/distribute/nccl.hpp"
#include "typeflow/distribute/nccl_communicator.hpp"

namespace typeflow::backend::cuda {

// The gradient all-reduce overlapped with the backward pass.
//
// The gradient region (one flat float array per replica, layer after layer)
// is cut by distribute::plan_buckets into buckets of ~bucket_bytes, last
// layers first. The backward pass calls gradient_ready(l, compute) after
// layer l's backward has been enqueued; when every layer of a bucket is ready,
// an event is recorded on the compute stream there, the communication stream
// (one per replica, highest priority) waits for it, and the bucket's
// all-reduce is launched on the communication stream: it runs while the
// backward pass goes on with the lower layers. Buckets are launched in the
// plan's order (a bucket completed early waits for the ones before it), so
// every rank issues the same collectives in the same order whatever order
// the layers are reported in. finish(compute) launches any bucket not yet
// launched (layers never reported are taken as ready) and makes the compute
// stream wait for all of them; it ends the step.
//
//   mirrored<N>:  bucketed_all_reduce ar(comms, gradient_pointers, offsets, total);
//                 for l from the last layer down: backward of l on every device,
//                   then ar.gradient_ready(l, compute_streams);  // one stream per replica
//                 ar.finish(compute_streams);                    // then the optimizer
//   multi_worker: bucketed_all_reduce ar(comm, gradients, offsets, total);
//                 ... ar.gradient_ready(l, compute); ... ar.finish(compute);
//                 comm.wait(compute);   // the deadline; after the graph launch if captured
//
// Capturable (see the header comment): the events fork the communication
// streams from the capturing compute stream(s) and finish() joins them back.
// The object is bound to its communicator and to the gradient pointers; the
// same object serves every step, eager or captured.
class bucketed_all_reduce {
 public:
  // mirrored<N>: gradients[r] is replica r's region, on device r.
  bucketed_all_reduce(nccl_communicators& comms, std::span<float* const> gradients,
                      std::span<const std::size_t> layer_float_offsets, std::size_t total_floats,
                      std::size_t bucket_bytes = distribute::default_bucket_bytes)
      : local_(&comms), gradients_(gradients.begin(), gradients.end()) {
    if (static_cast<int>(gradients_.size()) != comms.size())
      throw std::invalid_argument("typeflow: bucketed_all_reduce: " + std::to_string(gradients_.size()) +
                                  " gradient regions for " + std::to_string(comms.size()) + " replicas");
    for (int r = 0; r < comms.size(); ++r) devices_.push_back(comms.device(r));
    set_up(layer_float_offsets, total_floats, bucket_bytes);
  }

  // multi_worker: this rank's region, on comm.device().
  bucketed_all_reduce(nccl_communicator& comm, float* gradients, std::span<const std::size_t> layer_float_offsets,
                      std::size_t total_floats, std::size_t bucket_bytes = distribute::default_bucket_bytes)
      : rank_(&comm), gradients_{gradients}, devices_{comm.device()} {
    set_up(layer_float_offsets, total_floats, bucket_bytes);
  }

  bucketed_all_reduce(const bucketed_all_reduce&) = delete;
  bucketed_all_reduce& operator=(const bucketed_all_reduce&) = delete;

  // zero<2, ...>: from now on each bucket is reduce-scattered over the
  // shards cut at `cut` (replicas or ranks + 1 bounds) instead of
  // all-reduced: each replica (rank) gets the mean of its shard's part of
  // the bucket, and keeps its own gradients elsewhere.
  void reduce_scatter_over(std::span<const std::size_t> cut) { cut_.assign(cut.begin(), cut.end()); }

  int replicas() const noexcept { return static_cast<int>(devices_.size()); }
  std::size_t layers() const noexcept { return owner_.size(); }
  const std::vector<distribute::gradient_bucket>& buckets() const noexcept { return buckets_; }
  cudaStream_t communication_stream(int replica = 0) const { return streams_.at(static_cast<std::size_t>(replica)); }

  // Layer `layer`'s gradients are enqueued on compute_streams (one per
  // replica, each on its replica's device).
  void gradient_ready(std::size_t layer, std::span<const cudaStream_t> compute_streams) {
    check_streams(compute_streams, "gradient_ready");
    if (layer >= layers())
      throw std::out_of_range("typeflow: bucketed_all_reduce::gradient_ready: layer " + std::to_string(layer) +
                              " of " + std::to_string(layers()));
    if (reported_[layer])
      throw std::logic_error("typeflow: bucketed_all_reduce::gradient_ready: layer " + std::to_string(layer) +
                             " reported twice in one step (finish() ends a step)");
    reported_[layer] = 1;
    const std::size_t b = owner_[layer];
    if (--pending_[b] == 0) mark_ready(b, compute_streams);
    while (launched_ < buckets_.size() && pending_[launched_] == 0) launch(launched_++);
  }
  void gradient_ready(std::size_t layer, cudaStream_t compute_stream) {
    gradient_ready(layer, std::span<const cudaStream_t>(&compute_stream, 1));
  }

  // Launches what is left, then makes each compute stream wait for every
  // all-reduce of the step. Ends the step (the next gradient_ready starts the
  // next one).
  void finish(std::span<const cudaStream_t> compute_streams) {
    check_streams(compute_streams, "finish");
    for (; launched_ < buckets_.size(); ++launched_) {
      if (pending_[launched_] != 0) {
        pending_[launched_] = 0;
        mark_ready(launched_, compute_streams);
      }
      launch(launched_);
    }
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      const device_guard on(devices_[r]);
      done_[r].record(streams_[r]);
      done_[r].wait_on(compute_streams[r]);
    }
    start_step();
  }
  void finish(cudaStream_t compute_stream) { finish(std::span<const cudaStream_t>(&compute_stream, 1)); }

 private:
  void set_up(std::span<const std::size_t> layer_float_offsets, std::size_t total_floats, std::size_t bucket_bytes) {
    for (float* g : gradients_)
      if (!g && total_floats > 0)
        throw std::invalid_argument("typeflow: bucketed_all_reduce: a gradient region is null");
    const std::size_t bucket_floats = bucket_bytes / sizeof(float) > 0 ? bucket_bytes / sizeof(float) : 1;
    buckets_ = distribute::plan_buckets(layer_float_offsets, total_floats, bucket_floats);
    owner_ = distribute::bucket_of_layers(buckets_);
    const std::size_t R = devices_.size();
    for (std::size_t r = 0; r < R; ++r) {
      const device_guard on(devices_[r]);  // streams and events belong to the current device
      owned_streams_.emplace_back();
      streams_.push_back(owned_streams_.back().get());
      done_.emplace_back();
    }
    ready_.reserve(buckets_.size() * R);
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (std::size_t r = 0; r < R; ++r) {
        const device_guard on(devices_[r]);
        ready_.emplace_back();
      }
    regions_.resize(R);
    start_step();
  }

  void start_step() {
    pending_.resize(buckets_.size());
    for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].layers();
    reported_.assign(owner_.size(), 0);
    launched_ = 0;
  }

  void check_streams(std::span<const cudaStream_t> compute_streams, const char* what) const {
    if (compute_streams.size() != devices_.size())
      throw std::invalid_argument(std::string("typeflow: bucketed_all_reduce::") + what + ": " +
                                  std::to_string(compute_streams.size()) + " compute stream(s) for " +
                                  std::to_string(devices_.size()) + " replica(s)");
  }

  // The bucket's gradients are complete at this point of each compute stream.
  void mark_ready(std::size_t b, std::span<const cudaStream_t> compute_streams) {
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      const device_guard on(devices_[r]);
      ready_[b * devices_.size() + r].record(compute_streams[r]);
    }
  }

  void launch(std::size_t b) {
    const std::size_t R = devices_.size();
    for (std::size_t r = 0; r < R; ++r) {
      const device_guard on(devices_[r]);
      ready_[b * R + r].wait_on(streams_[r]);  // the fork: the communication stream joins the compute stream
    }
    const auto& bucket = buckets_[b];
    if (bucket.count == 0) return;
    if (local_ && !cut_.empty()) {
      local_->reduce_scatter_mean(gradients_.data(), bucket.offset, bucket.count, cut_, streams_.data(),
                                  "ncclReduce (the gradients' reduce-scatter)");
    } else if (local_) {
      for (std::size_t r = 0; r < R; ++r) regions_[r] = gradients_[r] + bucket.offset;
      local_->all_reduce_mean(regions_.data(), bucket.count, streams_.data());
    } else if (!cut_.empty()) {
      rank_->reduce_scatter_mean(gradients_[0], bucket.offset, bucket.count, cut_, streams_[0]);
    } else {
      rank_->all_reduce_mean(gradients_[0] + bucket.offset, bucket.count, streams_[0]);
    }
  }

  nccl_communicators* local_ = nullptr;
  nccl_communicator* rank_ = nullptr;
  std::vector<float*> gradients_;  // per replica
  std::vector<int> devices_;       // per replica
  std::vector<distribute::gradient_bucket> buckets_;
  std::vector<std::size_t> owner_;  // per layer: its bucket
  std::vector<detail::priority_stream> owned_streams_;
  std::vector<cudaStream_t> streams_;  // per replica: the communication stream
  std::vector<event> ready_;           // [bucket * replicas + replica]
  std::vector<event> done_;            // per replica
  std::vector<float*> regions_;        // scratch: one bucket's start on every replica
  std::vector<std::size_t> cut_;       // zero<2>: the shards' bounds, each bucket reduce-scattered over them
  std::vector<std::size_t> pending_;   // per bucket: layers not yet reported this step
  std::vector<unsigned char> reported_;
  std::size_t launched_ = 0;  // buckets [0, launched_) launched this step
};

}  // namespace typeflow::backend::cuda
