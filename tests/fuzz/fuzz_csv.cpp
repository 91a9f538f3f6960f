// Fuzz target: data::csv (include/typeflow/data/csv.hpp).
//
// The input's first byte chooses the reading: bit 0 a header line, bit 1 a
// float label (else an int32 class id), bits 2-3 the label column (0, 1, 2
// or -1). The rest is the file, read as 3 columns. An accepted file yields
// exactly cardinality() examples.
#include <cstdint>
#include <optional>

#include <typeflow/data/csv.hpp>

#include "fuzz_support.hpp"

namespace data = typeflow::data;
namespace fz = typeflow::fuzz;

namespace {

template <class Label>
void read(const std::filesystem::path& path, int label_column, bool has_header) {
  std::optional<data::csv_dataset<3, Label>> dataset;
  if (!fz::refused_or_read(path, [&] { dataset.emplace(data::csv<3, Label>(path, label_column, has_header)); }))
    return;
  fz::require(dataset->cardinality() >= 0, "csv gave a negative cardinality");
  auto cursor = dataset->open();
  typename data::csv_dataset<3, Label>::element_type example;
  std::int64_t count = 0;
  while (cursor.next(example)) ++count;
  fz::require(count == dataset->cardinality(), "csv's cursor yields another count than its cardinality");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const auto path = fz::write_scratch("table.csv", data + 1, size - 1);
  const bool has_header = mode & 1;
  const int label_column = (mode >> 2 & 3) == 3 ? -1 : mode >> 2 & 3;
  if (mode & 2)
    read<float>(path, label_column, has_header);
  else
    read<std::int32_t>(path, label_column, has_header);
  return 0;
}
