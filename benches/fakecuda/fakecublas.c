#include <stdlib.h>
typedef struct { int magic; void *stream; } handle;
int cublasCreate_v2(handle **h) { *h = calloc(1, sizeof **h); return 0; }
int cublasDestroy_v2(handle *h) { free(h); return 0; }
int cublasSetStream_v2(handle *h, void *s) { h->stream = s; return 0; }
int cublasGetStream_v2(handle *h, void **s) { *s = h->stream; return 0; }
int cublasGetVersion_v2(handle *h, int *v) { (void)h; *v = 120800; return 0; }
