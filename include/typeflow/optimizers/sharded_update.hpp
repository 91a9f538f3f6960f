// One optimizer update over a region cut into shards, each shard updated by
// its own replica at the same time (zero<k>, distribute/zero.hpp): replica s
// holds shard s's optimizer slots and runs apply_update (update.hpp) on its
// shard alone. What an update needs of the whole region comes first:
//
//   the norms     clipnorm's per tensor and global_clipnorm's over every
//                 gradient. With the whole gradient in one buffer (zero<1>:
//                 the mean is in replica 0's) they are computed from it as
//                 apply_update computes them, so the factors are the same
//                 bits. Without (zero<2>: each replica holds its shard of the
//                 mean) each shard computes its pieces' squared norms, and a
//                 tensor's is the sum of its pieces' in shard order: for a
//                 tensor that a shard boundary cuts that sum can differ from
//                 the whole tensor's in its last bits (double), which can move
//                 the float factor by an ulp. The global norm then adds the
//                 tensors' in table order, as apply_update does. Across
//                 processes (zero<2, multi_worker>) each process holds one
//                 shard, and the tensors' norms are summed over the
//                 processes (sum_across) before that.
//   the verdicts  the NaN policy's and the loss scale's, which the engine
//                 takes over every shard before calling this (so no shard
//                 updates while another refuses): the arguments carry no
//                 non_finite.
//
// Everything else an update does is per element, so a shard's elements get
// the bits one unsharded update gives them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

// One shard of the region: [begin, end) in floats, and the pieces of the
// parameter tensors inside it, offsets from `begin` (a tensor a boundary
// cuts is a piece in each shard it reaches), each with its tensor's index in
// the whole table.
struct region_shard {
  std::ptrdiff_t begin = 0, end = 0;
  std::vector<parameter_tensor> pieces;
  std::vector<std::size_t> tensor_of_piece;
};

// The region cut at `bounds`: shard s is [bounds[s], bounds[s + 1]).
inline std::vector<region_shard> cut_region(std::span<const parameter_tensor> tensors,
                                            std::span<const std::ptrdiff_t> bounds) {
  std::vector<region_shard> shards;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    region_shard shard{bounds[s], bounds[s + 1], {}, {}};
    for (std::size_t j = 0; j < tensors.size(); ++j) {
      const auto begin = std::max(static_cast<std::ptrdiff_t>(tensors[j].offset), shard.begin);
      const auto end = std::min(static_cast<std::ptrdiff_t>(tensors[j].offset + tensors[j].size), shard.end);
      if (begin >= end) continue;
      shard.pieces.push_back({static_cast<std::size_t>(begin - shard.begin), static_cast<std::size_t>(end - begin),
                              tensors[j].kind});
      shard.tensor_of_piece.push_back(j);
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

// Runs job(context, s) for every shard s at once, each on its replica's
// thread, returning when all are done and rethrowing a job's exception (on
// the CPU: replica_pool::run, distribute/mirrored.hpp).
struct shard_runner {
  using job = void (*)(void* context, int shard);
  void (*run_jobs)(void* pool, job, void* context) = nullptr;
  void* pool = nullptr;
  template <class F>
  void operator()(F& f) const {
    run_jobs(pool, [](void* context, int s) { (*static_cast<F*>(context))(s); }, &f);
  }
};

// What one sharded update is given.
struct sharded_update {
  std::span<const parameter_tensor> tensors;    // the whole table, as update_arguments::tensors
  std::span<const region_shard> shards;
  // Shard s's: weights, grads and slots at its first element, floats its
  // length, tensors its pieces, the iteration; no non_finite, no tensor_copies.
  std::span<const update_arguments> arguments;
  // The whole region's gradients where one buffer holds them (zero<1>), else
  // nullptr (zero<2>): where the norms come from (above).
  const float* whole_grads = nullptr;
  shard_runner run;
  // Shards held by other processes (zero<k, multi_worker>): `shards` is this
  // process's own alone, and sum_across(context, norms, n) adds the tensors'
  // squared norms over the processes (an MPI all-reduce); unset in one process.
  void (*sum_across)(void* context, double* norms, std::size_t n) = nullptr;
  void* sum_context = nullptr;
};

// Whether an optimizer can update in shards: one with a rule, or
// accumulate<K> of one (a custom update() sees the whole region).
template <class O>
constexpr bool updates_in_shards() {
  if constexpr (requires(const O& o) { o.inner; })
    return rule_optimizer<std::remove_cvref_t<decltype(O::inner)>>;
  else
    return rule_optimizer<O>;
}

// The sharded update of a rule optimizer: the norms it clips by, then
// apply_update on every shard at once.
template <rule_optimizer O>
void apply_sharded_update(const O& o, const sharded_update& u) {
  const clip_kind clip = clip_options_of(o).kind;
  const std::size_t count = u.shards.size();
  std::size_t pieces = 0;
  for (const region_shard& shard : u.shards) pieces += shard.pieces.size();
  // The whole tensors' squared norms, then each piece's (reused each step).
  std::vector<double>& norms = detail::scratch<double>(u.tensors.size() + pieces);
  std::vector<update_arguments>& arguments = detail::scratch<update_arguments>(count);
  std::copy(u.arguments.begin(), u.arguments.end(), arguments.begin());
  if (clip == clip_kind::norm || clip == clip_kind::global_norm) {
    double* whole = norms.data();
    double* of_piece = norms.data() + u.tensors.size();
    std::fill(norms.begin(), norms.end(), 0.0);
    if (u.whole_grads) {
      for (std::size_t j = 0; j < u.tensors.size(); ++j)
        if (u.tensors[j].kind != param_kind::statistic)
          whole[j] = detail::squared_norm(u.whole_grads + u.tensors[j].offset, u.tensors[j].size);
    } else {
      auto partial = [&](int s) {
        const region_shard& shard = u.shards[static_cast<std::size_t>(s)];
        double* own = of_piece;
        for (int before = 0; before < s; ++before) own += u.shards[static_cast<std::size_t>(before)].pieces.size();
        for (std::size_t k = 0; k < shard.pieces.size(); ++k)
          if (shard.pieces[k].kind != param_kind::statistic)
            own[k] = detail::squared_norm(arguments[static_cast<std::size_t>(s)].grads + shard.pieces[k].offset,
                                          shard.pieces[k].size);
      };
      u.run(partial);
      const double* piece = of_piece;
      for (const region_shard& shard : u.shards)
        for (std::size_t k = 0; k < shard.pieces.size(); ++k) whole[shard.tensor_of_piece[k]] += *piece++;
      if (u.sum_across) u.sum_across(u.sum_context, whole, u.tensors.size());
    }
    double global = 0;
    for (std::size_t j = 0; j < u.tensors.size(); ++j)
      if (u.tensors[j].kind != param_kind::statistic) global += whole[j];
    double* piece = of_piece;
    for (std::size_t s = 0; s < count; ++s) {
      const region_shard& shard = u.shards[s];
      for (std::size_t k = 0; k < shard.pieces.size(); ++k) piece[k] = whole[shard.tensor_of_piece[k]];
      arguments[s].tensor_squared_norms = piece;
      arguments[s].global_squared_norm = global;
      piece += shard.pieces.size();
    }
  }
  auto update = [&](int s) {
    const update_arguments& a = arguments[static_cast<std::size_t>(s)];
    if (a.floats > 0) apply_update(o, a);
  };
  u.run(update);
}

}  // namespace typeflow::optimizers
