// padding and window: the vocabulary of 2-D sliding windows, shared by the
// convolution (conv2d.hpp) and pooling (pooling.hpp, zero_padding2d.hpp)
// layers, so that either header can be included alone or both together.
//
//   padding::valid  windows lie wholly inside the input
//   padding::same   out = ceil(in / stride); the input is padded, the
//                   smaller half before (top/left), as Keras and TensorFlow do
//   window{n}       an n x n extent (implicit: max_pooling2d<3> is 3 x 3)
//   window{h, w}    h rows by w columns (max_pooling2d<{2, 3}>)
#pragma once

namespace typeflow {

enum class padding { valid, same };

struct window {
  int height, width;
  constexpr window(int n) : height(n), width(n) {}
  constexpr window(int h, int w) : height(h), width(w) {}
};

}  // namespace typeflow
