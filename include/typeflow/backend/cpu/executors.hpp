// Every layer's CPU executor: what model<Net, Policy, Strategy, cpu> needs
// visible where it sets up a step program.
#pragma once

#include "typeflow/backend/cpu/activations.hpp"
#include "typeflow/backend/cpu/attention.hpp"
#include "typeflow/backend/cpu/batch_norm.hpp"
#include "typeflow/backend/cpu/conv2d.hpp"
#include "typeflow/backend/cpu/dense.hpp"
#include "typeflow/backend/cpu/dropout.hpp"
#include "typeflow/backend/cpu/embedding.hpp"
#include "typeflow/backend/cpu/layer_norm.hpp"
#include "typeflow/backend/cpu/pooling.hpp"
#include "typeflow/backend/cpu/softmax.hpp"
#include "typeflow/backend/cpu/zero_padding2d.hpp"
