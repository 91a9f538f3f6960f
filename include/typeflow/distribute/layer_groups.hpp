// layer_groups<Net>: what zero<3> (distribute/zero.hpp) gathers before each
// top-level layer of a bound network and frees after it, in floats of the
// trainable region [0, T):
//
//   own[i]          layer i's trained parameters [begin, end) (empty for a
//                   layer without any, or a frozen one: its lie beyond T,
//                   whole on every replica);
//   per_child[i]    whether layer i is a combinator (repeat, recompute,
//                   residual, a nested sequential), whose children are
//                   gathered one at a time (contract/layer.hpp's
//                   parameter_hooks) instead of the layer whole;
//   tied_source[i]  for a layer that reads another's matrix (tied_logits:
//                   the embedding's), that layer; layer_count otherwise;
//   largest_parameters  the most floats gathered at once: a layer's own and
//                   its tied source's, or a combinator's largest child's;
//   largest_gradients   the most gradient floats a replica holds beyond its
//                   shard during backward: the largest gathered unit's, and
//                   the tied source's, which tied_logits' backward writes
//                   and the embedding's completes later.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

template <class Net>
struct layer_groups {
  static constexpr std::size_t count = Net::layer_count;
  struct range {
    std::size_t begin = 0, end = 0;
    constexpr std::size_t size() const { return end - begin; }
  };

  static constexpr std::array<range, count> own = [] {
    using plan = memory_plan<Net, 0, 0>;
    std::array<range, count> ranges{};
    for (std::size_t i = 0; i < count; ++i) {
      if (Net::trained_floats[i] == 0) continue;
      const std::size_t begin = plan::layer_parameter_offset[i] / sizeof(float);
      ranges[i] = {begin, begin + Net::trained_floats[i]};
    }
    return ranges;
  }();

  // The first layer with an embedding matrix (step_program's rule), or count.
  static constexpr std::size_t matrix_layer = []<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t found = count;
    ((found = (found == count && requires { Net::template layer<I>::embedding_matrix; }) ? I : found), ...);
    return found;
  }(std::make_index_sequence<count>{});

  static constexpr std::array<bool, count> per_child = []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<bool, count>{[] {
      using layer = typename Net::template layer<I>;
      if constexpr (requires { layer::is_chain; })
        return layer::is_chain && Net::trained_floats[I] > 0;
      else
        return false;
    }()...};
  }(std::make_index_sequence<count>{});
  // The floats gathered at once for layer i: its own, or its largest child's.
  static constexpr std::array<std::size_t, count> unit = []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<std::size_t, count>{[] {
      using layer = typename Net::template layer<I>;
      if constexpr (requires { layer::is_chain; layer::child_param_floats; }) {
        if (layer::is_chain && Net::trained_floats[I] > 0) {
          std::size_t most = 0;
          for (std::size_t floats : layer::child_param_floats) most = std::max(most, floats);
          return most;
        }
      }
      return Net::trained_floats[I];
    }()...};
  }(std::make_index_sequence<count>{});

  static constexpr std::array<std::size_t, count> tied_source = [] {
    std::array<std::size_t, count> sources{};
    for (std::size_t i = 0; i < count; ++i) sources[i] = Net::uses_tied_embedding[i] ? matrix_layer : count;
    return sources;
  }();

  // Whether layer i's matrix is another's too (tied_logits' embedding): it
  // is gathered with that layer as well, and its gradients add up over both
  // backwards.
  static constexpr std::array<bool, count> is_tied_source = [] {
    std::array<bool, count> tied{};
    for (std::size_t i = 0; i < count; ++i)
      if (tied_source[i] < count) tied[tied_source[i]] = true;
    return tied;
  }();

  static constexpr std::size_t largest_parameters = [] {
    std::size_t most = 0;
    for (std::size_t i = 0; i < count; ++i)
      most = std::max(most, unit[i] + (tied_source[i] < count ? own[tied_source[i]].size() : 0));
    return most;
  }();
  static constexpr std::size_t largest_gradients = [] {
    std::size_t most = 0, tied = 0;
    for (std::size_t i = 0; i < count; ++i) {
      most = std::max(most, unit[i]);
      if (tied_source[i] < count) tied = own[tied_source[i]].size();
    }
    return most + tied;
  }();
};

}  // namespace typeflow
