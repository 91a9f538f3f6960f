// The model whose checkpoints fuzz_checkpoint.cpp expects and
// make_seed_corpus.cpp writes: a dense<3> on 4 inputs (16 floats) under Adam.
#pragma once

#include <typeflow/io/checkpoint.hpp>
#include <typeflow/train/checkpointing.hpp>

namespace typeflow::fuzz {

inline const checkpoint_identity checkpoint_fuzz_identity{
    "sequential<float32 input(4), dense<3>>", "float32", "single_device", "cpu", 16};
inline constexpr const char* checkpoint_fuzz_optimizer = "adam";
inline constexpr int checkpoint_fuzz_slots = 2;

}  // namespace typeflow::fuzz
