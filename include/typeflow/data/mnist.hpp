// mnist: the MNIST digits, read from the four uncompressed IDX files in a directory.
//
//   split::train   train-images-idx3-ubyte, train-labels-idx1-ubyte   60000 samples
//   split::test    t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte    10000 samples
//   element        example<tensor_value<std::uint8_t, shape<28, 28>>,   pixels 0..255
//                          tensor_value<std::int32_t, shape<>>>         digit 0..9
//
// Both files are read fully, once, at construction, into storage shared by
// every copy of the dataset and every cursor. Anything wrong with them is a
// std::runtime_error naming the file: missing (or only present as .gz), bad
// magic number, images that are not 28x28, a truncated file, label and image
// counts that differ, a label that is not a digit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/core/shape.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/from_tensor_slices.hpp"
#include "typeflow/data/idx.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

enum class split { train, test };

class mnist {
 public:
  static constexpr int rows = 28;
  static constexpr int columns = 28;
  static constexpr int classes = 10;

  using image_shape = shape<rows, columns>;
  using samples = tensor_slices_dataset<std::uint8_t, image_shape, std::int32_t, shape<>>;
  using element_type = samples::element_type;
  using cursor = samples::cursor;

  mnist(std::filesystem::path dir, split which) : samples_(load(dir, which)) {}

  std::int64_t cardinality() const noexcept { return samples_.cardinality(); }
  cursor open(std::uint64_t epoch = 0) const { return samples_.open(epoch); }

  static std::filesystem::path images_file(const std::filesystem::path& dir, split which) {
    return dir / (which == split::train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
  }
  static std::filesystem::path labels_file(const std::filesystem::path& dir, split which) {
    return dir / (which == split::train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte");
  }

 private:
  static samples load(const std::filesystem::path& dir, split which) {
    const std::filesystem::path images_path = images_file(dir, which);
    const std::filesystem::path labels_path = labels_file(dir, which);

    idx_array images = read_idx(images_path, idx_type::uint8, 3);  // (n, 28, 28)
    if (images.dims[1] != rows || images.dims[2] != columns)
      throw std::runtime_error("mnist: " + images_path.string() + " holds images of " +
                               std::to_string(images.dims[1]) + "x" + std::to_string(images.dims[2]) +
                               " pixels, expected 28x28");

    const idx_array labels = read_idx(labels_path, idx_type::uint8, 1);  // (n)
    if (labels.dims[0] != images.dims[0])
      throw std::runtime_error("mnist: " + images_path.string() + " holds " + std::to_string(images.dims[0]) +
                               " images but " + labels_path.string() + " holds " +
                               std::to_string(labels.dims[0]) + " labels; the two files must match");

    constexpr std::size_t label_header_bytes = 8;
    std::vector<std::int32_t> label_values(labels.bytes.size());
    for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
      if (labels.bytes[i] >= classes)
        throw std::runtime_error("mnist: " + labels_path.string() + ": label " + std::to_string(labels.bytes[i]) +
                                 " at byte offset " + std::to_string(label_header_bytes + i) + " (sample " +
                                 std::to_string(i) + ") is not a digit 0-9");
      label_values[i] = labels.bytes[i];
    }
    return samples(std::move(images.bytes), std::move(label_values));
  }

  samples samples_;
};

}  // namespace typeflow::data
