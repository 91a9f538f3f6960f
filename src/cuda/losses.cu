// backend/cuda/losses.hpp's row_loss, compiled once (typeflow::cuda's kernel
// library) for each loss of its device_row_losses list.
#include <tuple>

#include "typeflow/backend/cuda/kernels/row_loss.cuh"

namespace typeflow::backend::cuda {

namespace {
template <class... Loss>
constexpr auto instantiate(loss_list<Loss...>) {
  return std::make_tuple(&row_loss<Loss>...);
}
}  // namespace
// Taking each launcher's address instantiates it here, for the list as it
// is; the table has external linkage, so it and every launcher are emitted.
using launcher_table = decltype(instantiate(device_row_losses{}));
extern const launcher_table row_loss_launchers;
const launcher_table row_loss_launchers = instantiate(device_row_losses{});

}  // namespace typeflow::backend::cuda
