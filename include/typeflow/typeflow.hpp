// typeflow: train deep-learning models whose architecture is a C++ type.
// One include for everything a user needs.
#pragma once

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/data/data.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/activations.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/layers/dropout.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/reshape.hpp"
#include "typeflow/layers/softmax.hpp"
#include "typeflow/losses/losses.hpp"
#include "typeflow/metrics/metrics.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/model/sequential.hpp"
#include "typeflow/optimizers/optimizers.hpp"
#include "typeflow/schedules/schedules.hpp"
#include "typeflow/train/model.hpp"
