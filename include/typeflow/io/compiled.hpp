// Where the file formats' code is compiled: in every translation unit that
// uses it (header-only, the default), or once, into the typeflow_io library
// (CMake's typeflow::typeflow defines TYPEFLOW_COMPILED_IO for its users and
// links it). That code (safetensors, checkpoints and their JSON, through
// nlohmann/json) is compiled wherever fit is, since fit's callbacks may save
// weights and checkpoints; compiled once, it leaves about 10 of the 33 s an
// example takes to compile with g++ -O2 (examples/toy_resnet.cpp, 2 cores).
//
// Each such function is written once, its body between
//   TYPEFLOW_IO_INLINE <signature>
//   #if TYPEFLOW_IO_DEFINITIONS
//   { ... }
//   #else
//   ;
//   #endif
// so that it is an inline definition (header-only), a declaration (a user of
// the library), or an ordinary definition (src/typeflow_io.cpp, which
// defines TYPEFLOW_IO_IMPLEMENTATION). Every translation unit of a program
// must agree on TYPEFLOW_COMPILED_IO.
#pragma once

#if defined(TYPEFLOW_COMPILED_IO) && TYPEFLOW_COMPILED_IO
#define TYPEFLOW_IO_INLINE
#if defined(TYPEFLOW_IO_IMPLEMENTATION)
#define TYPEFLOW_IO_DEFINITIONS 1
#else
#define TYPEFLOW_IO_DEFINITIONS 0
#endif
#else
#define TYPEFLOW_IO_INLINE inline
#define TYPEFLOW_IO_DEFINITIONS 1
#endif
