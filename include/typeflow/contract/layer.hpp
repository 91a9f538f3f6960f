// What every layer shares: its place in the network, its parameters, and the
// buffers it reads and writes at run time.
//
// A layer is a spec template (dense<512>, relu, ...) with a nested
// bind<InputShape, Context>. The bound type states the layer's compile-time
// facts (output shape, parameters, FLOPs, whether its output or gradient may
// share its input's buffer). What runs it is found elsewhere, per device:
// executor<Spec, Layer, Batch, Device> (contract/executor.hpp), specialised
// under backend/cpu and backend/cuda, works over fixed addresses in the
// model's arena. Nothing here depends on a backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/fixed_string.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/regularizers/regularizers.hpp"

namespace typeflow {

// A layer's precision, decided when the network is bound under a policy
// (precision/policy.hpp): Compute is the policy's compute dtype, which a
// layer may override for itself (dense<10, float32>); Input is how the
// previous layer stored this layer's input; HandOnCompute says whether the
// layers after this one read 16-bit values, so that it may store its output
// in its compute dtype. Otherwise outputs are float32: every layer that
// cannot read 16 bits (layer_norm, attention, the loss, ...) gets float32
// input, and nothing is converted between layers.
template <class Compute = float32, class Input = float32, bool HandOnCompute = false>
struct layer_precision {
  using compute = Compute;
  using input = Input;
  static constexpr bool hand_on_compute = HandOnCompute;
};

// How a layer spec takes 16-bit input: not at all (the default; the layer
// before it stores float32), as any dtype it converts itself (dense), or by
// passing the dtype through unchanged (element-wise layers and views), in
// which case it can take 16 bits when the layer after it can.
enum class dtype_flow { float32_only, any, passes_through };
template <class Spec>
inline constexpr dtype_flow dtype_flow_of = dtype_flow::float32_only;

// Whether the layers from position I of the spec tuple Specs on read 16-bit
// input (past the end is the loss, which reads float32).
template <class Specs, std::size_t I>
constexpr bool reads_16bit_from() {
  if constexpr (I >= std::tuple_size_v<Specs>) {
    return false;
  } else {
    constexpr dtype_flow flow = dtype_flow_of<std::tuple_element_t<I, Specs>>;
    if constexpr (flow == dtype_flow::any) return true;
    else if constexpr (flow == dtype_flow::passes_through) return reads_16bit_from<Specs, I + 1>();
    else return false;
  }
}

// Where a layer sits: its index in the sequential (input is 0), and the specs
// before and after it (void at the ends), so that a matmul can fuse the
// activation that follows it. DecodeLength is 0 when the network runs over
// whole sequences (training, evaluation); model::generate binds the same
// specs a second time for one position at a time, with DecodeLength the
// longest sequence a key/value cache must hold (attention keeps its cache in
// its workspace, positional embeddings read run_state::position). Specs is
// the whole network's std::tuple of specs, for layers that reach another
// layer's parameters (tied_logits reuses the embedding matrix).
//
// Nested is true inside a combinator, whose root names the parameters (see
// model/chain.hpp). What tells apart layers that share a position (the
// children of a combinator) is layer_io::salt, at run time: the copies of
// repeat<N, block> then bind as one type, and the block compiles once.
//
// Precision is a layer_precision<>.
//
// Gpu is true when the network is bound for tf::cuda (model<..., cuda>),
// whose executors keep their scratch in scratchpads of their own (never the
// arena's scratch region) and run attention fused, the (T, T) scores never
// stored: a layer whose CPU executor needs such room asks for it only when
// Gpu is false, so that the GPU's plan and device budget hold what it uses.
template <int Position, class Previous, class Next, int DecodeLength = 0, class Specs = void, bool Nested = false,
          class Precision = layer_precision<>, bool Gpu = false>
struct layer_context {
  using precision = Precision;
  static constexpr int position = Position;
  static constexpr int decode_length = DecodeLength;
  static constexpr bool nested = Nested;
  static constexpr bool gpu = Gpu;
  using previous = Previous;
  using next = Next;
  using specs = Specs;
};

// The place of a child of a combinator at Outer: the neighbours are its
// siblings, the position (for error messages) and the rest are inherited;
// Precision is worked out among the siblings (see chain.hpp). Which child it
// is does not enter the type: the executors pass child_salt() on.
template <class Outer, class Previous, class Next, class Precision = layer_precision<>>
using nested_context = layer_context<Outer::position, Previous, Next, Outer::decode_length, typename Outer::specs,
                                     true, Precision, Outer::gpu>;

// layer_io::salt of child `index` of a combinator whose own salt is `outer`
// (a layer of the network has its position as its salt).
constexpr std::uint64_t child_salt(std::uint64_t outer, std::size_t index) {
  return outer * 1000003u + index + 1;
}

// A check whose name carries the facts: when a static_assert on it fails,
// g++ prints "'layer_check<layer_at<3, reshape<7, 7>>, given<shape<10>>,
// false>::passed' evaluates to false" under the rule's sentence.
template <int Position, class Spec>
struct layer_at {};
template <class... Shapes>
struct given {};
template <class Where, class Given, bool Ok>
struct layer_check {
  static constexpr bool passed = Ok;
};

// What a parameter is for. Optimizers decide by kind whether weight decay
// applies (adamw and lion decay kernels and embeddings only, by default), and
// statistics (batch_norm's moving mean and variance) are not trained at all:
// no layer writes a gradient for them, so every update leaves them as they are.
enum class param_kind { kernel, bias, scale, offset, embedding, statistic };

constexpr std::string_view to_string(param_kind kind) {
  switch (kind) {
    case param_kind::kernel: return "kernel";
    case param_kind::bias: return "bias";
    case param_kind::scale: return "scale";
    case param_kind::offset: return "offset";
    case param_kind::embedding: return "embedding";
    case param_kind::statistic: return "statistic";
  }
  return "?";
}

// The stored length of a matrix row of n floats: padded to 64 bytes, and by
// 64 bytes more when that is a multiple of 512 bytes. Rows whose stride is a
// large power of two map onto the same cache sets; oneDNN's matmul on a
// (1024, 1024) kernel ran at 90 GFLOP/s with a 1024-float stride and at 188
// with 1040 on this project's 2-core AVX2 machine (bench/train_step_bench).
constexpr std::size_t padded_row_length(std::size_t n) {
  std::size_t stride = (n + 15) / 16 * 16;
  if (stride % 128 == 0) stride += 16;
  return stride;
}

// One parameter tensor: its name within the layer, its shape, initializer,
// kind and regularizer. Tensors of rank 2 and more are stored as rows of
// their last axis with a padded stride (row_stride); the padding holds zeros,
// gets zero gradients, and never reaches a weights file.
template <fixed_string Name, class Shape, class Initializer, param_kind Kind = param_kind::kernel,
          class Regularizer = regularizers::none>
struct param {
  static constexpr std::string_view name = Name.view();
  using shape_type = Shape;
  using initializer = Initializer;
  using regularizer = Regularizer;
  static constexpr param_kind kind = Kind;
  // A frozen tensor (frozen_param: LoRA's base kernel) lives outside the
  // trainable region: no gradient, no optimizer slot (memory_plan.hpp).
  static constexpr bool frozen = false;
  static constexpr bool trainable = Kind != param_kind::statistic;
  static constexpr std::size_t size = Shape::size;
  static constexpr std::size_t row_length = Shape::rank >= 2 ? static_cast<std::size_t>(Shape::template dim<-1>) : size;
  static constexpr std::size_t rows = size / (row_length ? row_length : 1);
  static constexpr std::size_t row_stride = Shape::rank >= 2 ? padded_row_length(row_length) : row_length;
  static constexpr std::size_t stored_floats = rows * row_stride;
};

// Parameters are laid out with each tensor on a 64-byte boundary, so that
// vector loads and oneDNN's kernels see aligned rows.
inline constexpr std::size_t arena_alignment = 64;
constexpr std::size_t align_up(std::size_t bytes, std::size_t alignment = arena_alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}
constexpr std::size_t aligned_floats(std::size_t count) {
  return align_up(count * sizeof(float)) / sizeof(float);
}

// P, held constant: a parameter a layer reads but nothing trains (LoRA's base
// kernel and bias). It keeps its name, shape and initializer; the memory plan
// puts it with the frozen tensors, so it has no gradient and no optimizer slot,
// and its layer's executor computes no gradient for it.
template <class P>
struct frozen_param : P {
  static constexpr bool frozen = true;
  static constexpr bool trainable = false;
};

// A layer's parameters come in two groups, each laid out in order: the
// trained tensors (io.params, with their gradients at io.grads) and the
// frozen ones (io.frozen_params). A list without frozen tensors is one group.
template <class... Params>
struct param_list {
  static constexpr std::size_t count = sizeof...(Params);
  using tuple = std::tuple<Params...>;
  // Floats of the trained group, each tensor padded to the alignment.
  static constexpr std::size_t floats =
      (std::size_t{0} + ... + (Params::frozen ? 0 : aligned_floats(Params::stored_floats)));
  // Floats of the frozen group.
  static constexpr std::size_t frozen_floats =
      (std::size_t{0} + ... + (Params::frozen ? aligned_floats(Params::stored_floats) : 0));
  // Real parameters, without the padding.
  static constexpr std::size_t parameter_count = (std::size_t{0} + ... + Params::size);
  static constexpr std::size_t trainable_count = (std::size_t{0} + ... + (Params::trainable ? Params::size : 0));
  template <std::size_t I>
  static constexpr bool is_frozen = std::tuple_element_t<I, tuple>::frozen;
  // Offset (in floats) of parameter I within its group's region.
  template <std::size_t I>
  static constexpr std::size_t offset = [] {
    constexpr std::size_t sizes[] = {aligned_floats(Params::stored_floats)..., 0};
    constexpr bool frozen[] = {Params::frozen..., false};
    std::size_t sum = 0;
    for (std::size_t i = 0; i < I; ++i)
      if (frozen[i] == frozen[I]) sum += sizes[i];
    return sum;
  }();
};

// zero<3> (train/cpu_replicas.hpp): a combinator at the top of a network
// (repeat, recompute, residual, a nested sequential) calls these around each
// child that has trained parameters, [params, params + floats) of its
// replica's parameter region, so that the child's weights are gathered just
// before it runs and freed after, and its gradients reduced after its
// backward. Its children's children call nothing.
struct parameter_hooks {
  void* owner = nullptr;
  void (*before)(void* owner, const float* params, std::size_t floats) = nullptr;
  void (*after_forward)(void* owner, const float* params, std::size_t floats) = nullptr;
  void (*after_backward)(void* owner, const float* params, std::size_t floats) = nullptr;
};

// What a step is doing, shared by every layer of a model.
struct run_state {
  bool training = false;         // dropout active, statistics updated
  std::uint64_t seed = 0;        // the model's seed
  std::uint64_t step = 0;        // counts training steps, so dropout masks differ per step
  int position = 0;              // decoding (generate): the index of the position being fed
  // A training step: the batch's samples present (a last partial batch's;
  // batch statistics count only them); -1: all of them.
  int valid_samples = -1;
  // zero<3>'s, for the top-level combinators (nullptr: none).
  const parameter_hooks* hooks = nullptr;
};

// The fixed addresses one layer works on, resolved from the memory plan, on
// Device (cpu or cuda): host memory or one GPU's arena. The context is the
// backend's (a oneDNN engine and stream; a CUDA stream, cuBLASLt handle and
// the device's step counter), declared by backend/device.hpp.
template <class Device>
struct layer_io {
  const float* in = nullptr;    // (B, input_shape)
  float* out = nullptr;         // (B, output_shape)
  float* d_in = nullptr;        // (B, input_shape), nullptr when no gradient is wanted
  const float* d_out = nullptr; // (B, output_shape)
  float* params = nullptr;      // the layer's trained parameters
  float* grads = nullptr;       // their gradients, laid out alike
  float* frozen_params = nullptr;  // its frozen tensors (frozen_param), when it has any
  std::byte* workspace = nullptr;  // per-layer bytes kept from forward to backward
  bool workspace_persists = false;  // and from one step to the next (not inside recompute<...>)
  std::byte* scratch = nullptr;    // bytes valid only during one forward() or backward() call,
                                   // shared by every layer (see scratch_bytes_per_sample)
  // tied_logits: the embedding matrix it reuses, and that matrix's gradient.
  // tied_gradient_written tells the embedding that the logits' backward,
  // which runs first, has already written (not added to) its gradient.
  const float* tied_params = nullptr;
  float* tied_grads = nullptr;
  bool tied_gradient_written = false;
  typename Device::context* context = nullptr;
  const run_state* run = nullptr;
  // A combinator at the top of a network under zero<3>: run->hooks, which it
  // calls around its children (parameter_hooks); nullptr otherwise.
  const parameter_hooks* hooks = nullptr;
  // Tells apart layers that share a position, so that two dropouts in two
  // repeated blocks never draw the same mask: a network's layer I has I, the
  // children of a combinator child_salt(its salt, their index).
  std::uint64_t salt = 0;
};

// Layers without parameters.
using no_params = param_list<>;

// Parameter I of a layer's list, wherever its group lies, and its gradient
// (a frozen tensor has none).
template <class Params, std::size_t I, class Device>
float* param_data(const layer_io<Device>& io) {
  return (Params::template is_frozen<I> ? io.frozen_params : io.params) + Params::template offset<I>;
}
template <class Params, std::size_t I, class Device>
float* param_gradient(const layer_io<Device>& io) {
  static_assert(!Params::template is_frozen<I>, "a frozen tensor has no gradient");
  return io.grads + Params::template offset<I>;
}

// The facts every bound layer provides, with defaults a layer overrides.
struct layer_defaults {
  using params = no_params;
  static constexpr std::size_t flops_per_sample = 0;
  static constexpr bool output_aliases_input = false;  // out == in (reshape, fused activation)
  static constexpr bool gradient_in_place = false;     // d_in == d_out
  // Whether it does no work in either direction, on any device (the input,
  // views such as flatten): then it needs no executor of its own.
  static constexpr bool computes_nothing = false;
  static constexpr std::size_t workspace_bytes_per_sample = 0;  // scales with the batch (dropout's mask)
  static constexpr std::size_t workspace_bytes_per_step = 0;    // does not (batch_norm's batch statistics)
  // Bytes a layer needs only while its forward() or backward() runs (e.g.
  // attention's per-head gradients, a recomputed block's activations). One
  // region, as large as the largest need, serves every layer in turn.
  static constexpr std::size_t scratch_bytes_per_sample = 0;
  static constexpr std::size_t scratch_bytes_per_step = 0;
  // Whether the layer reads the network's embedding matrix (tied_logits).
  static constexpr bool uses_tied_embedding = false;
  // The length its output's rows are stored with when longer than the
  // output shape's last axis, 0 when not: tied_logits pads the vocabulary
  // on a GPU (layers/embedding.hpp). The plan sizes the output and its
  // gradient by it (stored_output_size); the extra columns mean nothing.
  static constexpr int stored_row_length = 0;
  // Whether, as the network's last layer, the loss may write its gradient
  // over this layer's output (its backward never reads the output): the
  // plan then keeps no gradient buffer of the output's size. A GPU's
  // tied_logits does (layers/embedding.hpp).
  static constexpr bool loss_gradient_over_output = false;
  // Whether its parameters' names are whole ("blocks.3.attn.qkv.kernel")
  // rather than relative to "layers.<position>." (repeat<> at the top level).
  static constexpr bool absolute_names = false;
  // The dtype it computes in, and the one it stores its output in (see
  // layer_precision); layers that know only float32 keep these.
  using compute_dtype = float32;
  using output_dtype = float32;
};

// Floats of one sample's output as the plan stores it (its rows padded
// to stored_row_length where a layer asks for it).
template <class L>
constexpr std::size_t stored_output_size() {
  using out = typename L::output_shape;
  if constexpr (requires { L::stored_row_length; })
    if constexpr (L::stored_row_length > 0)
      return out::size / static_cast<std::size_t>(out::template dim<-1>) *
             static_cast<std::size_t>(L::stored_row_length);
  return out::size;
}

// What executors without library primitives share: no scratchpad to bind
// (see contract/executor.hpp for the executor's contract).
struct executor_defaults {
  std::size_t scratchpad_bytes() const { return 0; }
  void bind(std::byte*) {}
};

}  // namespace typeflow
