// typeflow::data: the input pipeline, tf.data style.
//
//   auto train = mnist("data/mnist", split::train)   // example<uint8 (28, 28), int32 ()>
//              | map(scale(1.f / 255))               // example<float (28, 28), int32 ()>
//              | shuffle(60'000, /*seed=*/42)        // reshuffled each epoch from (seed, epoch)
//              | batch<128>;                         // batch_of<128, ...>, 469 per epoch
//
// A dataset is a cheap-to-copy description with a compile-time element_type;
// open(epoch) returns a cursor, and cursor.next(element) fills element in
// place until it returns false. Nothing allocates per element after open().
#pragma once

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"
#include "typeflow/data/idx.hpp"
#include "typeflow/data/from_tensor_slices.hpp"
#include "typeflow/data/mnist.hpp"
#include "typeflow/data/map.hpp"
#include "typeflow/data/shuffle.hpp"
#include "typeflow/data/batch.hpp"
