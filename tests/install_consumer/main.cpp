// Compiled against an installed typeflow: the headers, the include path and the
// C++20 requirement all come from find_package(typeflow) and typeflow::typeflow.
#include <typeflow/core/shape.hpp>

static_assert(typeflow::shape<28, 28>::size == 784);

int main() { return 0; }
