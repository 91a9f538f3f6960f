// The file formats' code (safetensors, checkpoints and their JSON), compiled
// once into the typeflow_io library; see typeflow/io/compiled.hpp.
#define TYPEFLOW_IO_IMPLEMENTATION
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/train/checkpointing.hpp"
#include "typeflow/train/fit_snapshot.hpp"
