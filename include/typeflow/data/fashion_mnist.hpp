// fashion_mnist: Zalando's Fashion-MNIST, a drop-in for MNIST with clothes.
//
//   fashion_mnist(split::train)        from fashion_mnist_default_dir (Debian's
//                                      dataset-fashion-mnist, gzipped IDX files)
//   fashion_mnist(dir, split::test)    from dir, raw or gzipped
//   element  example<tensor_value<std::uint8_t, shape<28, 28>>,   pixels 0..255
//                    tensor_value<std::int32_t, shape<>>>         class 0..9, see class_names
//
// The files, their names and checks are MNIST's (mnist.hpp): 60000 training
// and 10000 test images, each file read as named or as name + ".gz"; errors
// name the file and, for corrupt or truncated data, the byte offset.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "typeflow/data/mnist.hpp"

namespace typeflow::data {

// Where `apt-get install dataset-fashion-mnist` puts the four .gz files.
inline constexpr const char* fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";

class fashion_mnist {
 public:
  static constexpr int rows = detail::mnist_layout::rows;
  static constexpr int columns = detail::mnist_layout::columns;
  static constexpr int classes = detail::mnist_layout::classes;
  static constexpr std::array<std::string_view, classes> class_names{
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

  using image_shape = detail::mnist_layout::image_shape;
  using samples = detail::mnist_layout::samples;
  using element_type = samples::element_type;
  using cursor = samples::cursor;

  explicit fashion_mnist(split which) : fashion_mnist(fashion_mnist_default_dir, which) {}
  fashion_mnist(std::filesystem::path dir, split which)
      : samples_(detail::mnist_layout::load(dir, which, "fashion_mnist")) {}

  std::int64_t cardinality() const noexcept { return samples_.cardinality(); }
  bool random_access() const noexcept { return true; }
  cursor open(std::uint64_t epoch = 0) const { return samples_.open(epoch); }

 private:
  samples samples_;
};

}  // namespace typeflow::data
