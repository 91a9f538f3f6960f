// check_labels<Classes>(labels, rows): sparse labels are class ids, checked
// where they enter the loss, on every device.
//
// An id outside [0, Classes) trained silently on another class, or made the
// loss read and write outside its row (the gradient at the label). One pass
// over a batch's ids, before anything of the step runs; dense labels (one
// float per class) need no check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/core/id_range.hpp"

namespace typeflow {

template <int Classes, class Label>
void check_labels(const Label* labels, std::ptrdiff_t rows) {
  if constexpr (std::is_same_v<Label, std::int32_t>) {
    const std::ptrdiff_t r = first_outside(labels, rows, Classes);
    if (r >= 0)
      throw std::invalid_argument("sparse labels are class ids in [0, " + std::to_string(Classes) + "); label " +
                                  std::to_string(r) + " of the batch is " + std::to_string(labels[r]) +
                                  ". Nothing of this step ran");
  }
}

}  // namespace typeflow
