// Every layer's CPU executor: what model<Net, Policy, Strategy, cpu> needs
// visible where it sets up a step program.
#pragma once

#include "typeflow/backend/cpu/activations.hpp"
#include "typeflow/backend/cpu/dense.hpp"
