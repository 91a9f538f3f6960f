// backend/cuda/context.hpp's for_each_index, compiled once (typeflow::cuda's
// kernel library) for each of the merge layers' functors, the loss per
// output's row mean (losses/output_rows.hpp) and a bf16 head's row weights
// (backend/cuda/losses.hpp).
#include "typeflow/backend/cuda/kernels/for_each_index.cuh"
#include "typeflow/backend/cuda/losses.hpp"
#include "typeflow/layers/merge_functors.hpp"
#include "typeflow/losses/output_rows.hpp"

namespace typeflow::backend::cuda {

#define TYPEFLOW_FOR_EACH_INDEX(...) \
  template void for_each_index<__VA_ARGS__>(std::size_t, __VA_ARGS__, cudaStream_t);
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::axpby)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::product)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::extreme<true>)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::extreme<false>)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::route)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::place)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::row_dot)
TYPEFLOW_FOR_EACH_INDEX(typeflow::detail::merge_fn::scale_rows)
TYPEFLOW_FOR_EACH_INDEX(typeflow::losses::add_weighted_row_mean)
TYPEFLOW_FOR_EACH_INDEX(weight_bf16_rows)
#undef TYPEFLOW_FOR_EACH_INDEX

}  // namespace typeflow::backend::cuda
