// typeflow::data: the input pipeline, tf.data style.
//
//   auto train = mnist("data/mnist", split::train)    // example<uint8 (28, 28), int32 ()>
//              | map(scale(1.f / 255), 2)             // example<float (28, 28), int32 ()>, 2 worker threads, in order
//              | cache()                              // epochs after the first read memory
//              | shuffle(60'000, /*seed=*/42)         // reshuffled each epoch from (seed, epoch)
//              | batch<128>                           // batch_of<128, ...>, 469 per epoch
//              | prefetch(2);                         // made on a background thread, 2 batches ahead
//
// A dataset is a cheap-to-copy description with a compile-time element_type;
// open(epoch) returns a cursor, and cursor.next(element) fills element in
// place until it returns false. Nothing allocates per element after open().
//
// Sources       from_tensor_slices, from_values, range, generator, mnist,
//               fashion_mnist, text_file, lm_windows, csv
// Combinators   map, filter, shuffle, batch, unbatch, repeat, take, skip, zip,
//               zip_named, examples, enumerate, interleave, shard, cache, prefetch
// Named parts   record, parts, named (a model's several inputs and outputs)
// Behind a type any_dataset<Element>
// As ranges    for (auto& b : ds), for (auto& b : epoch(ds, k))
#pragma once

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"
#include "typeflow/data/background_thread.hpp"
#include "typeflow/data/read_file.hpp"
#include "typeflow/data/idx.hpp"
// Sources
#include "typeflow/data/from_tensor_slices.hpp"
#include "typeflow/data/from_values.hpp"
#include "typeflow/data/range.hpp"
#include "typeflow/data/generator.hpp"
#include "typeflow/data/mnist.hpp"
#include "typeflow/data/fashion_mnist.hpp"
#include "typeflow/data/text_file.hpp"
#include "typeflow/data/lm_windows.hpp"
#include "typeflow/data/csv.hpp"
// Combinators
#include "typeflow/data/map.hpp"
#include "typeflow/data/filter.hpp"
#include "typeflow/data/shuffle.hpp"
#include "typeflow/data/batch.hpp"
#include "typeflow/data/rebatch.hpp"
#include "typeflow/data/unbatch.hpp"
#include "typeflow/data/repeat.hpp"
#include "typeflow/data/take.hpp"
#include "typeflow/data/skip.hpp"
#include "typeflow/data/record.hpp"
#include "typeflow/data/zip.hpp"
#include "typeflow/data/zip_named.hpp"
#include "typeflow/data/enumerate.hpp"
#include "typeflow/data/interleave.hpp"
#include "typeflow/data/shard.hpp"
#include "typeflow/data/cache.hpp"
#include "typeflow/data/prefetch.hpp"
#include "typeflow/data/any_dataset.hpp"
#include "typeflow/data/iteration.hpp"
