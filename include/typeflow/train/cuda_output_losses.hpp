// A loss per output (train/output_losses.hpp) on tf::cuda: the host's
// output_losses::per_output steps over the packed (samples, width) output
// and label rows, each step a kernel of the library (for_each_index over
// merge_fn::place, axpby and losses/output_rows.hpp's row mean), each
// output's loss through its own device executor (backend/cuda/losses.hpp).
// The blocks they work in live in a buffer per device, set up by prepare()
// when the engine lays out a batch size's program (never inside a captured
// step). The outputs, weights and the labels' layout are the host's
// output_losses', which fit settles by name at its first batch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/losses.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/train/output_losses.hpp"

namespace typeflow {

class cuda_output_losses final : public backend::cuda::device_loss_base {
 public:
  // Each output's loss executor, in the order of output_losses::entries.
  explicit cuda_output_losses(std::vector<std::unique_ptr<backend::cuda::device_loss_base>> losses)
      : losses_(std::move(losses)) {}

  // The host's combined loss (training_state's, after compile()).
  void attach(const detail::output_losses* host) {
    if (!host || host->entries.size() != losses_.size())
      throw std::logic_error("cuda_output_losses: the host's losses per output do not match the device's");
    host_ = host;
  }

  losses::label_form form() const override { return losses::label_form::dense; }

  // Room for `rows` samples on the current device (output_losses::block_floats).
  void prepare(int rows) override {
    if (!host_) return;
    const std::size_t floats = host_->block_floats(static_cast<std::size_t>(rows));
    int device = 0;
    TYPEFLOW_CUDA_CHECK(cudaGetDevice(&device));
    block& b = blocks_[device];
    if (b.floats >= floats) return;
    b.buffer = backend::cuda::device_buffer(floats * sizeof(float));
    b.floats = floats;
  }

  // outputs, d_outputs: (rows, width) packed (row_stride == width: a
  // network with several outputs pads none); labels: (rows, label width)
  // packed floats (a class-id part's int32 bits); row_losses: (rows). The
  // host's steps (output_losses::per_output), each a kernel.
  void record(const float* outputs, const void* labels, float* d_outputs, float* row_losses, int rows, int width,
              int row_stride, int valid_rows, cudaStream_t s) const override {
    if (!host_) throw std::logic_error("cuda_output_losses: record before the host's losses are attached");
    if (row_stride != width) throw std::logic_error("cuda_output_losses: the outputs' rows are padded");
    int device = 0;
    TYPEFLOW_CUDA_CHECK(cudaGetDevice(&device));
    const auto n = static_cast<std::size_t>(rows);
    const auto held = blocks_.find(device);
    if (held == blocks_.end() || held->second.floats < host_->block_floats(n))
      throw std::logic_error("cuda_output_losses: record for more rows than prepare() made room for");
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(d_outputs, 0, n * static_cast<std::size_t>(width) * sizeof(float), s));
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(row_losses, 0, n * sizeof(float), s));
    const auto each = [s](std::size_t count, const auto& f) { backend::cuda::for_each_index(count, f, s); };
    const auto run_loss = [&](std::size_t k, const float* o, const float* l, float* d, float* r, std::ptrdiff_t loss_rows,
                              int classes, std::ptrdiff_t valid_loss_rows) {
      losses_[k]->record(o, l, d, r, static_cast<int>(loss_rows), classes, classes, static_cast<int>(valid_loss_rows),
                         s);
    };
    host_->per_output(outputs, static_cast<const float*>(labels), d_outputs, row_losses, n,
                      static_cast<std::size_t>(valid_rows), held->second.buffer.template data<float>(), each, run_loss);
  }

 private:
  struct block {
    backend::cuda::device_buffer buffer;
    std::size_t floats = 0;
  };
  std::vector<std::unique_ptr<backend::cuda::device_loss_base>> losses_;
  const detail::output_losses* host_ = nullptr;
  std::map<int, block> blocks_;  // per device: mirrored<N>'s replicas share this executor
};

}  // namespace typeflow
