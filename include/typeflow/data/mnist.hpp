// mnist: the MNIST digits, read from the four IDX files in a directory, raw or gzipped.
//
//   split::train   train-images-idx3-ubyte, train-labels-idx1-ubyte   60000 samples
//   split::test    t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte    10000 samples
//   element        example<tensor_value<std::uint8_t, shape<28, 28>>,   pixels 0..255
//                          tensor_value<std::int32_t, shape<>>>         digit 0..9
//
// Each file is read as named or, when only the same name + ".gz" is there,
// decompressed with zlib (read_idx). Both files are read fully, once, at
// construction, into storage shared by every copy of the dataset and every
// cursor. Anything wrong with them is a std::runtime_error naming the file:
// missing, bad magic number, images that are not 28x28, a truncated file (with
// the offset where it ends), a corrupt gzip stream (with its offset), label and
// image counts that differ, a label that is not a digit (with its offset).
//
// fashion_mnist (fashion_mnist.hpp) has the same files, shapes and element type.
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

namespace detail {

// The MNIST file layout, shared by mnist and fashion_mnist.
struct mnist_layout {
  static constexpr int rows = 28;
  static constexpr int columns = 28;
  static constexpr int classes = 10;
  using image_shape = shape<rows, columns>;
  using samples = tensor_slices_dataset<std::uint8_t, image_shape, std::int32_t, shape<>>;

  static std::filesystem::path images_file(const std::filesystem::path& dir, split which) {
    return dir / (which == split::train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
  }
  static std::filesystem::path labels_file(const std::filesystem::path& dir, split which) {
    return dir / (which == split::train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte");
  }

  // Reads and checks one split; `name` ("mnist", "fashion_mnist") starts each message.
  static samples load(const std::filesystem::path& dir, split which, const char* name) {
    idx_array images = read_idx(images_file(dir, which), idx_type::uint8, 3);  // (n, 28, 28)
    if (images.dims[1] != rows || images.dims[2] != columns)
      throw std::runtime_error(std::string(name) + ": " + images.file.string() + " holds images of " +
                               std::to_string(images.dims[1]) + "x" + std::to_string(images.dims[2]) +
                               " pixels, expected 28x28");

    const idx_array labels = read_idx(labels_file(dir, which), idx_type::uint8, 1);  // (n)
    if (labels.dims[0] != images.dims[0])
      throw std::runtime_error(std::string(name) + ": " + images.file.string() + " holds " +
                               std::to_string(images.dims[0]) + " images but " + labels.file.string() + " holds " +
                               std::to_string(labels.dims[0]) + " labels; the two files must match");

    constexpr std::size_t label_header_bytes = 8;
    std::vector<std::int32_t> label_values(labels.bytes.size());
    for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
      if (labels.bytes[i] >= classes)
        throw std::runtime_error(std::string(name) + ": " + labels.described() + ": label " +
                                 std::to_string(labels.bytes[i]) + " at byte offset " +
                                 std::to_string(label_header_bytes + i) + " (sample " + std::to_string(i) +
                                 ") is not a class 0-9");
      label_values[i] = labels.bytes[i];
    }
    return samples(std::move(images.bytes), std::move(label_values));
  }
};

}  // namespace detail

class mnist {
 public:
  static constexpr int rows = detail::mnist_layout::rows;
  static constexpr int columns = detail::mnist_layout::columns;
  static constexpr int classes = detail::mnist_layout::classes;

  using image_shape = detail::mnist_layout::image_shape;
  using samples = detail::mnist_layout::samples;
  using element_type = samples::element_type;
  using cursor = samples::cursor;

  mnist(std::filesystem::path dir, split which) : samples_(detail::mnist_layout::load(dir, which, "mnist")) {}

  std::int64_t cardinality() const noexcept { return samples_.cardinality(); }
  bool random_access() const noexcept { return true; }
  cursor open(std::uint64_t epoch = 0) const { return samples_.open(epoch); }

  static std::filesystem::path images_file(const std::filesystem::path& dir, split which) {
    return detail::mnist_layout::images_file(dir, which);
  }
  static std::filesystem::path labels_file(const std::filesystem::path& dir, split which) {
    return detail::mnist_layout::labels_file(dir, which);
  }

 private:
  samples samples_;
};

}  // namespace typeflow::data
