// typeflow: train deep-learning models whose architecture is a C++ type.
// One include for everything a user needs, except multi_worker: MPI is not
// needed to train on one machine. A program that uses multi_worker includes
// "typeflow/distribute/multi_worker.hpp" itself, or defines TYPEFLOW_MULTI_WORKER
// to 1 before this include (typeflow::mpi does), and links MPI.
#pragma once

#include "typeflow/callbacks/callbacks.hpp"
#include "typeflow/core/dtype.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/data/data.hpp"
#include "typeflow/distribute/rank_memory.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/io/hf_gpt2.hpp"
#include "typeflow/io/lora_merge.hpp"
#include "typeflow/layers/activations.hpp"
#include "typeflow/layers/attention.hpp"
#include "typeflow/layers/batch_norm.hpp"
#include "typeflow/layers/conv2d.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/layers/dropout.hpp"
#include "typeflow/layers/embedding.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/layer_norm.hpp"
#include "typeflow/layers/lora.hpp"
#include "typeflow/layers/merge.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/layers/pooling.hpp"
#include "typeflow/layers/reshape.hpp"
#include "typeflow/layers/softmax.hpp"
#include "typeflow/layers/window.hpp"
#include "typeflow/layers/zero_padding2d.hpp"
#include "typeflow/losses/losses.hpp"
#include "typeflow/metrics/metrics.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/model/frozen.hpp"
#include "typeflow/model/functional.hpp"
#include "typeflow/model/graph.hpp"
#include "typeflow/model/recompute.hpp"
#include "typeflow/model/repeat.hpp"
#include "typeflow/model/residual.hpp"
#include "typeflow/model/sequential.hpp"
#include "typeflow/optimizers/optimizers.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/precision/policy.hpp"
#include "typeflow/precision/storage.hpp"
#include "typeflow/regularizers/regularizers.hpp"
#include "typeflow/schedules/schedules.hpp"
#include "typeflow/text/text.hpp"
#include "typeflow/train/model.hpp"

#if defined(TYPEFLOW_MULTI_WORKER) && TYPEFLOW_MULTI_WORKER
#include "typeflow/distribute/multi_worker.hpp"  // includes <mpi.h>
#endif
