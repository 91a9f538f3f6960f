// Proves the compile-fail mechanism: this file must not compile, and the
// compiler must say the text on the expected-error line.
//
// expected-error: int is not three bytes
static_assert(sizeof(int) == 3, "int is not three bytes");

int main() { return 0; }
