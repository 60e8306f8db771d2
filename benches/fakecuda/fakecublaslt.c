#include <stdlib.h>
int cublasLtCreate(void **h) { *h = calloc(1, 16); return 0; }
size_t cublasLtGetVersion(void) { return 120800; }
