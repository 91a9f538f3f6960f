// host_tensor: values in host memory with their shape, row-major, as predict
// returns them (Keras's predict gives an array with .shape). It is the
// std::vector<float> of its values, so code that reads the flat values keeps
// working; shape() and t(i, j, ...) add what a Keras user reaches for.
//
//   auto y = model.predict(test);   // y.shape() == {samples, 10}
//   float p = y(3, 7);              // sample 3, class 7: y[3 * 10 + 7]
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace typeflow {

class host_tensor : public std::vector<float> {
 public:
  host_tensor() = default;
  // values: the product of shape's extents of them, row-major.
  host_tensor(std::vector<float> values, std::vector<std::int64_t> shape)
      : std::vector<float>(std::move(values)), shape_(std::move(shape)) {
    std::int64_t count = 1;
    for (const std::int64_t d : shape_) {
      if (d < 0) throw std::invalid_argument("host_tensor: shape " + shape_string() + " has a negative extent");
      count *= d;
    }
    if (static_cast<std::size_t>(count) != size())
      throw std::invalid_argument("host_tensor: shape " + shape_string() + " holds " + std::to_string(count) +
                                  " values, but " + std::to_string(size()) + " were given");
  }

  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  int rank() const noexcept { return static_cast<int>(shape_.size()); }

  // The value at a full index, bounds-checked: t(i, j) for a rank-2 tensor.
  template <class... Index>
  float operator()(Index... index) const {
    const std::int64_t at[] = {static_cast<std::int64_t>(index)...};
    if (sizeof...(Index) != shape_.size())
      throw std::out_of_range("host_tensor: " + std::to_string(sizeof...(Index)) + " indices for a tensor of shape " +
                              shape_string());
    std::int64_t flat = 0;
    for (std::size_t a = 0; a < shape_.size(); ++a) {
      if (at[a] < 0 || at[a] >= shape_[a])
        throw std::out_of_range("host_tensor: index " + std::to_string(at[a]) + " on axis " + std::to_string(a) +
                                " of shape " + shape_string());
      flat = flat * shape_[a] + at[a];
    }
    return (*this)[static_cast<std::size_t>(flat)];
  }

  // "(1000, 10)", as Keras prints a shape.
  std::string shape_string() const {
    std::string s = "(";
    for (std::size_t a = 0; a < shape_.size(); ++a) s += (a ? ", " : "") + std::to_string(shape_[a]);
    return s + (shape_.size() == 1 ? ",)" : ")");
  }

 private:
  std::vector<std::int64_t> shape_;
};

}  // namespace typeflow
