/* Fake CUDA driver (libcuda.so) for host-side cost measurement without a GPU.
 * One device (cc 9.0, "Fake H100", 80 GB). Device memory is host memory; copies and
 * memsets are done synchronously; launches do nothing; every sync/query succeeds.
 * All functions cudarc 0.19.10 may load but this file does not implement come from
 * stubs.c (generated), which log their name on first call and return CUDA_SUCCESS. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_INVALID_DEVICE 101

static const unsigned long long TOTAL_MEM = 80ULL * 1000 * 1000 * 1000;

/* ---- spinlock (no pthread calls, so lock counts in profiles are locus's own) ---- */
typedef struct { int v; } spin_t;
static inline void spin_lock(spin_t *s) {
    while (__atomic_exchange_n(&s->v, 1, __ATOMIC_ACQUIRE)) while (__atomic_load_n(&s->v, __ATOMIC_RELAXED)) ;
}
static inline void spin_unlock(spin_t *s) { __atomic_store_n(&s->v, 0, __ATOMIC_RELEASE); }

/* ---- handles ---- */
typedef struct { int magic; int id; } fake_ctx;
typedef struct { int magic; unsigned flags; int priority; } fake_stream;
typedef struct { int magic; unsigned flags; struct timespec t; } fake_event;
typedef struct { int magic; char *image; } fake_module;
typedef struct { int magic; fake_module *mod; char name[]; } fake_func;
typedef struct { int magic; unsigned long long threshold; } fake_pool;
typedef struct { int magic; } fake_graph;

static fake_ctx PRIMARY = { 0xC7C7, 0 };
static fake_pool DEFAULT_POOL = { 0x9001, 0 };
static __thread __attribute__((tls_model("initial-exec"))) fake_ctx *current_ctx = NULL;

/* ---- small handles (streams, events, graphs): a 64-byte slab with a free list, so that
 * the fake driver makes no malloc/free calls of its own on hot paths ---- */
static void *slab_free;
static spin_t slab_lock;
static void *handle_alloc(size_t n) {
    void *p;
    if (n > 64) abort();
    spin_lock(&slab_lock);
    p = slab_free;
    if (p) slab_free = *(void **)p;
    spin_unlock(&slab_lock);
    if (!p) {
        /* carve a new chunk of 1024 handles (malloc'd once per chunk) */
        char *chunk = aligned_alloc(64, 64 * 1024);
        for (int i = 1; i < 1024; i++) {
            void *q = chunk + 64 * i;
            spin_lock(&slab_lock);
            *(void **)q = slab_free; slab_free = q;
            spin_unlock(&slab_lock);
        }
        p = chunk;
    }
    return p;
}
static void handle_free(void *p) {
    if (!p) return;
    spin_lock(&slab_lock);
    *(void **)p = slab_free; slab_free = p;
    spin_unlock(&slab_lock);
}

/* ---- device memory: size classes with free lists, a header before each block ---- */
#define HDR 256
#define NCLASS 40
static void *free_list[NCLASS];
static spin_t mem_lock;
static unsigned long long used_bytes, reserved_bytes, used_high, reserved_high;

static int size_class(size_t n) {
    int c = 8; /* 256 B minimum */
    while (((size_t)1 << c) < n) c++;
    return c;
}
static CUdeviceptr dev_alloc(size_t n) {
    int c = size_class(n ? n : 1);
    size_t sz = (size_t)1 << c;
    void *base = NULL;
    spin_lock(&mem_lock);
    if (c < NCLASS && free_list[c]) {
        base = free_list[c];
        free_list[c] = *(void **)((char *)base + 16);
    }
    used_bytes += sz;
    if (used_bytes > used_high) used_high = used_bytes;
    spin_unlock(&mem_lock);
    if (!base) {
        base = aligned_alloc(HDR, HDR + sz);
        if (!base) return 0;
        *(int *)base = c;
        spin_lock(&mem_lock);
        reserved_bytes += sz;
        if (reserved_bytes > reserved_high) reserved_high = reserved_bytes;
        spin_unlock(&mem_lock);
    }
    return (CUdeviceptr)((char *)base + HDR);
}
static void dev_free(CUdeviceptr p) {
    if (!p) return;
    char *base = (char *)p - HDR;
    int c = *(int *)base;
    spin_lock(&mem_lock);
    used_bytes -= (size_t)1 << c;
    if (c < NCLASS) {
        *(void **)(base + 16) = free_list[c];
        free_list[c] = base;
    }
    spin_unlock(&mem_lock);
}

/* ---- pinned host ranges (for cuPointerGetAttribute MEMORY_TYPE) ---- */
#define MAXPIN 4096
static struct { char *p; size_t n; } pinned[MAXPIN];
static int npinned;
static spin_t pin_lock;
static void pin_add(void *p, size_t n) {
    spin_lock(&pin_lock);
    if (npinned < MAXPIN) { pinned[npinned].p = p; pinned[npinned].n = n; npinned++; }
    spin_unlock(&pin_lock);
}
static void pin_del(void *p) {
    spin_lock(&pin_lock);
    for (int i = 0; i < npinned; i++) if (pinned[i].p == p) { pinned[i] = pinned[--npinned]; break; }
    spin_unlock(&pin_lock);
}
static int pin_find(const char *p) {
    int r = 0;
    spin_lock(&pin_lock);
    for (int i = 0; i < npinned; i++) if (p >= pinned[i].p && p < pinned[i].p + pinned[i].n) { r = 1; break; }
    spin_unlock(&pin_lock);
    return r;
}

/* ---- init, device ---- */
CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (ordinal != 0) return ERR_INVALID_DEVICE; *d = 0; return OK; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { (void)d; snprintf(name, len, "Fake H100"); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = TOTAL_MEM; return OK; }
CUresult cuDeviceComputeCapability(int *maj, int *min, CUdevice d) { (void)d; *maj = 9; *min = 0; return OK; }
CUresult cuDeviceGetUuid(unsigned char *u, CUdevice d) { (void)d; memset(u, 0x42, 16); return OK; }
CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) { (void)d; memset(u, 0x42, 16); return OK; }
CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) { (void)d; snprintf(s, len, "0000:01:00.0"); return OK; }
CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) { (void)a; (void)b; *can = 0; return OK; }
CUresult cuDeviceGetP2PAttribute(int *v, int attr, CUdevice a, CUdevice b) { (void)attr; (void)a; (void)b; *v = 0; return OK; }

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    (void)d;
    int r;
    switch (attr) {
    case 1: r = 1024; break;           /* max threads per block */
    case 2: case 3: r = 1024; break;   /* block dims */
    case 4: r = 64; break;
    case 5: r = 2147483647; break;     /* grid dims */
    case 6: case 7: r = 65535; break;
    case 8: r = 49152; break;          /* shared per block */
    case 9: r = 65536; break;
    case 10: r = 32; break;            /* warp */
    case 11: r = 2147483647; break;
    case 12: r = 65536; break;
    case 13: r = 1980000; break;       /* clock kHz */
    case 14: r = 512; break;
    case 15: r = 1; break;
    case 16: r = 132; break;           /* SMs */
    case 17: r = 0; break;
    case 18: r = 0; break;
    case 19: r = 1; break;
    case 20: r = 0; break;
    case 30: r = 512; break;
    case 31: r = 1; break;
    case 32: r = 1; break;
    case 33: r = 1; break;
    case 34: r = 0; break;
    case 35: r = 0; break;
    case 36: r = 2619000; break;       /* memory clock kHz */
    case 37: r = 5120; break;          /* bus width */
    case 38: r = 52428800; break;      /* L2 */
    case 39: r = 2048; break;          /* threads per SM */
    case 40: r = 5; break;
    case 41: r = 1; break;             /* unified addressing */
    case 50: r = 0; break;
    case 51: r = 32; break;
    case 75: r = 9; break;
    case 76: r = 0; break;
    case 78: r = 1; break;
    case 79: case 80: r = 1; break;
    case 81: r = 233472; break;
    case 82: r = 65536; break;
    case 83: r = 1; break;
    case 84: r = 0; break;
    case 85: r = 0; break;
    case 86: r = 0; break;
    case 87: r = 2; break;
    case 88: r = 0; break;
    case 89: r = 1; break;
    case 90: r = 1; break;
    case 91: r = 1; break;
    case 92: case 93: case 94: r = 1; break;
    case 95: r = 1; break;
    case 96: r = 0; break;
    case 97: r = 232448; break;
    case 98: r = 0; break;
    case 99: r = 1; break;
    case 100: r = 0; break;
    case 101: r = 0; break;
    case 102: r = 1; break;
    case 103: r = 1; break;
    case 104: case 105: r = 0; break;
    case 106: r = 32; break;
    case 107: r = 1; break;
    case 108: r = 31457280; break;
    case 109: r = 134213632; break;
    case 110: r = 1; break;
    case 111: r = 1024; break;
    case 112: r = 1; break;
    case 113: r = 1; break;
    case 114: r = 1; break;
    case 115: r = 1; break;            /* memory pools supported */
    case 116: r = 1; break;
    case 117: r = 1; break;
    case 118: r = 100; break;
    case 119: r = 1; break;
    default: r = (attr >= 21 && attr <= 74) ? 65536 : 0; break;
    }
    *v = r;
    return OK;
}

/* ---- contexts ---- */
CUresult cuDevicePrimaryCtxRetain(fake_ctx **c, CUdevice d) { (void)d; *c = &PRIMARY; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return OK; }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { (void)d; return OK; }
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned f) { (void)d; (void)f; return OK; }
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) { (void)d; *flags = 0; *active = 1; return OK; }
CUresult cuCtxSetCurrent(fake_ctx *c) { current_ctx = c; return OK; }
CUresult cuCtxGetCurrent(fake_ctx **c) { *c = current_ctx; return OK; }
CUresult cuCtxPushCurrent_v2(fake_ctx *c) { current_ctx = c; return OK; }
CUresult cuCtxPopCurrent_v2(fake_ctx **c) { if (c) *c = current_ctx; return OK; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return OK; }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuCtxGetApiVersion(fake_ctx *c, unsigned *v) { (void)c; *v = 12080; return OK; }
CUresult cuCtxGetFlags(unsigned *f) { *f = 0; return OK; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return OK; }
CUresult cuCtxEnablePeerAccess(fake_ctx *c, unsigned f) { (void)c; (void)f; return OK; }
CUresult cuCtxGetLimit(size_t *v, int limit) { (void)limit; *v = 0; return OK; }
CUresult cuCtxSetLimit(int limit, size_t v) { (void)limit; (void)v; return OK; }

/* ---- streams ---- */
CUresult cuStreamCreate(fake_stream **s, unsigned flags) {
    fake_stream *p = handle_alloc(sizeof *p); p->magic = 0x5757; p->flags = flags; p->priority = 0; *s = p; return OK;
}
CUresult cuStreamCreateWithPriority(fake_stream **s, unsigned flags, int prio) {
    fake_stream *p = handle_alloc(sizeof *p); p->magic = 0x5757; p->flags = flags; p->priority = prio; *s = p; return OK;
}
CUresult cuStreamDestroy_v2(fake_stream *s) { handle_free(s); return OK; }
CUresult cuStreamSynchronize(fake_stream *s) { (void)s; return OK; }
CUresult cuStreamQuery(fake_stream *s) { (void)s; return OK; }
CUresult cuStreamWaitEvent(fake_stream *s, fake_event *e, unsigned f) { (void)s; (void)e; (void)f; return OK; }
CUresult cuStreamGetCtx(fake_stream *s, fake_ctx **c) { (void)s; *c = &PRIMARY; return OK; }
CUresult cuStreamGetFlags(fake_stream *s, unsigned *f) { *f = s ? s->flags : 0; return OK; }
CUresult cuStreamGetPriority(fake_stream *s, int *p) { *p = s ? s->priority : 0; return OK; }
CUresult cuStreamIsCapturing(fake_stream *s, int *status) { (void)s; *status = 0; return OK; }
CUresult cuStreamGetCaptureInfo_v2(fake_stream *s, int *status, unsigned long long *id, void **g, void **deps, size_t *n) {
    (void)s; if (status) *status = 0; if (id) *id = 0; if (g) *g = NULL; if (deps) *deps = NULL; if (n) *n = 0; return OK;
}
CUresult cuStreamGetCaptureInfo_v3(fake_stream *s, int *status, unsigned long long *id, void **g, void **deps, void **edges, size_t *n) {
    (void)s; if (status) *status = 0; if (id) *id = 0; if (g) *g = NULL; if (deps) *deps = NULL; if (edges) *edges = NULL; if (n) *n = 0; return OK;
}
static __thread __attribute__((tls_model("initial-exec"))) int capturing;
CUresult cuStreamBeginCapture_v2(fake_stream *s, int mode) { (void)s; (void)mode; capturing = 1; return OK; }
CUresult cuStreamEndCapture(fake_stream *s, fake_graph **g) {
    (void)s; capturing = 0; fake_graph *p = handle_alloc(sizeof *p); p->magic = 0x6767; *g = p; return OK;
}
CUresult cuGraphInstantiateWithFlags(fake_graph **e, fake_graph *g, unsigned long long f) {
    (void)g; (void)f; fake_graph *p = handle_alloc(sizeof *p); p->magic = 0x6868; *e = p; return OK;
}
CUresult cuGraphInstantiate_v2(fake_graph **e, fake_graph *g, void *a, char *b, size_t c) {
    (void)g; (void)a; (void)b; (void)c; fake_graph *p = handle_alloc(sizeof *p); p->magic = 0x6868; *e = p; return OK;
}
CUresult cuGraphLaunch(fake_graph *e, fake_stream *s) { (void)e; (void)s; return OK; }
CUresult cuGraphExecDestroy(fake_graph *e) { handle_free(e); return OK; }
CUresult cuGraphDestroy(fake_graph *g) { handle_free(g); return OK; }

typedef void (*hostfn)(void *);
CUresult cuLaunchHostFunc(fake_stream *s, hostfn f, void *u) { (void)s; f(u); return OK; }

/* ---- events ---- */
CUresult cuEventCreate(fake_event **e, unsigned flags) {
    fake_event *p = handle_alloc(sizeof *p); p->magic = 0xE7E7; p->flags = flags; p->t.tv_sec = 0; p->t.tv_nsec = 0; *e = p; return OK;
}
CUresult cuEventDestroy_v2(fake_event *e) { handle_free(e); return OK; }
CUresult cuEventRecord(fake_event *e, fake_stream *s) {
    (void)s; if (!(e->flags & 2)) clock_gettime(CLOCK_MONOTONIC, &e->t); return OK; /* 2 = DISABLE_TIMING */
}
CUresult cuEventRecordWithFlags(fake_event *e, fake_stream *s, unsigned f) { (void)f; return cuEventRecord(e, s); }
CUresult cuEventSynchronize(fake_event *e) { (void)e; return OK; }
CUresult cuEventQuery(fake_event *e) { (void)e; return OK; }
CUresult cuEventElapsedTime(float *ms, fake_event *a, fake_event *b) {
    *ms = (float)((b->t.tv_sec - a->t.tv_sec) * 1e3 + (b->t.tv_nsec - a->t.tv_nsec) / 1e6); return OK;
}
CUresult cuEventElapsedTime_v2(float *ms, fake_event *a, fake_event *b) { return cuEventElapsedTime(ms, a, b); }

/* ---- memory ---- */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { *p = dev_alloc(n); return *p ? OK : 2; }
CUresult cuMemFree_v2(CUdeviceptr p) { dev_free(p); return OK; }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, fake_stream *s) { (void)s; *p = dev_alloc(n); return *p ? OK : 2; }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, fake_pool *pool, fake_stream *s) {
    (void)pool; (void)s; *p = dev_alloc(n); return *p ? OK : 2;
}
CUresult cuMemFreeAsync(CUdeviceptr p, fake_stream *s) { (void)s; dev_free(p); return OK; }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { (void)f; *p = dev_alloc(n); return *p ? OK : 2; }
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    *total = TOTAL_MEM; *free_b = TOTAL_MEM - reserved_bytes; return OK;
}
CUresult cuMemAllocHost_v2(void **p, size_t n) { *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095); pin_add(*p, n); return OK; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { (void)f; return cuMemAllocHost_v2(p, n); }
CUresult cuMemFreeHost(void *p) { pin_del(p); free(p); return OK; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) { (void)f; pin_add(p, n); return OK; }
CUresult cuMemHostUnregister(void *p) { pin_del(p); return OK; }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned f) { (void)f; *d = (CUdeviceptr)p; return OK; }
CUresult cuMemHostGetFlags(unsigned *f, void *p) { (void)p; *f = 0; return OK; }

CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove((void *)d, (void *)s, n); return OK; }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, fake_stream *st) { (void)st; memmove((void *)d, (void *)s, n); return OK; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)d, s, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)s, n); return OK; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove((void *)d, (void *)s, n); return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, fake_stream *st) { (void)st; memcpy((void *)d, s, n); return OK; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, fake_stream *st) { (void)st; memcpy(d, (void *)s, n); return OK; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, fake_stream *st) { (void)st; memmove((void *)d, (void *)s, n); return OK; }
CUresult cuMemcpyPeer(CUdeviceptr d, fake_ctx *dc, CUdeviceptr s, fake_ctx *sc, size_t n) { (void)dc; (void)sc; memmove((void *)d, (void *)s, n); return OK; }
CUresult cuMemcpyPeerAsync(CUdeviceptr d, fake_ctx *dc, CUdeviceptr s, fake_ctx *sc, size_t n, fake_stream *st) {
    (void)dc; (void)sc; (void)st; memmove((void *)d, (void *)s, n); return OK;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)d, v, n); return OK; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, fake_stream *s) { (void)s; memset((void *)d, v, n); return OK; }
static void set16(unsigned short *p, unsigned short v, size_t n) { for (size_t i = 0; i < n; i++) p[i] = v; }
static void set32(unsigned *p, unsigned v, size_t n) { if (v == 0) { memset(p, 0, n * 4); return; } for (size_t i = 0; i < n; i++) p[i] = v; }
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { set16((void *)d, v, n); return OK; }
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, fake_stream *s) { (void)s; set16((void *)d, v, n); return OK; }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { set32((void *)d, v, n); return OK; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, fake_stream *s) { (void)s; set32((void *)d, v, n); return OK; }
CUresult cuMemPrefetchAsync(CUdeviceptr d, size_t n, CUdevice dev, fake_stream *s) { (void)d; (void)n; (void)dev; (void)s; return OK; }

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    if (attr == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
        if (pin_find((const char *)p)) { *(unsigned *)data = 1; return OK; } /* HOST (pinned) */
        /* device memory cannot be told apart from pageable host memory here */
        return ERR_INVALID_VALUE;
    }
    return ERR_INVALID_VALUE;
}

/* ---- memory pools ---- */
CUresult cuDeviceGetDefaultMemPool(fake_pool **p, CUdevice d) { (void)d; *p = &DEFAULT_POOL; return OK; }
CUresult cuDeviceGetMemPool(fake_pool **p, CUdevice d) { (void)d; *p = &DEFAULT_POOL; return OK; }
CUresult cuMemPoolCreate(fake_pool **p, const void *props) { (void)props; fake_pool *q = calloc(1, sizeof *q); q->magic = 0x9001; *p = q; return OK; }
CUresult cuMemPoolDestroy(fake_pool *p) { if (p != &DEFAULT_POOL) free(p); return OK; }
CUresult cuMemPoolTrimTo(fake_pool *p, size_t n) { (void)p; (void)n; return OK; }
CUresult cuMemPoolSetAccess(fake_pool *p, const void *d, size_t n) { (void)p; (void)d; (void)n; return OK; }
CUresult cuMemPoolSetAttribute(fake_pool *p, int attr, void *v) {
    if (attr == 4) p->threshold = *(unsigned long long *)v;
    else if (attr == 6) reserved_high = *(unsigned long long *)v;
    else if (attr == 8) used_high = *(unsigned long long *)v;
    return OK;
}
CUresult cuMemPoolGetAttribute(fake_pool *p, int attr, void *v) {
    switch (attr) {
    case 1: case 2: case 3: *(int *)v = 1; break;
    case 4: *(unsigned long long *)v = p->threshold; break;
    case 5: *(unsigned long long *)v = reserved_bytes; break;
    case 6: *(unsigned long long *)v = reserved_high; break;
    case 7: *(unsigned long long *)v = used_bytes; break;
    case 8: *(unsigned long long *)v = used_high; break;
    default: return ERR_INVALID_VALUE;
    }
    return OK;
}

/* ---- modules, functions, launches ---- */
CUresult cuModuleLoadData(fake_module **m, const void *image) {
    fake_module *p = malloc(sizeof *p); p->magic = 0x3D3D; p->image = strdup((const char *)image); *m = p; return OK;
}
CUresult cuModuleLoadDataEx(fake_module **m, const void *image, unsigned n, void *o, void **v) {
    (void)n; (void)o; (void)v; return cuModuleLoadData(m, image);
}
CUresult cuModuleLoad(fake_module **m, const char *path) { (void)path; return cuModuleLoadData(m, ""); }
CUresult cuModuleUnload(fake_module *m) { if (m) { free(m->image); free(m); } return OK; }
CUresult cuModuleGetFunction(fake_func **f, fake_module *m, const char *name) {
    size_t n = strlen(name);
    fake_func *p = malloc(sizeof *p + n + 1); p->magic = 0xF0F0; p->mod = m; memcpy(p->name, name, n + 1); *f = p; return OK;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr *d, size_t *n, fake_module *m, const char *name) {
    (void)m; (void)name; if (d) *d = dev_alloc(256); if (n) *n = 256; return OK;
}
CUresult cuFuncGetName(const char **name, fake_func *f) { *name = f->name; return OK; }
CUresult cuFuncGetModule(fake_module **m, fake_func *f) { *m = f->mod; return OK; }
CUresult cuFuncGetAttribute(int *v, int attr, fake_func *f) {
    (void)f;
    switch (attr) {
    case 0: *v = 1024; break; /* max threads per block */
    case 1: *v = 0; break;    /* shared */
    case 2: *v = 0; break;    /* const */
    case 3: *v = 0; break;    /* local */
    case 4: *v = 32; break;   /* regs */
    case 5: *v = 90; break;   /* ptx version */
    case 6: *v = 90; break;   /* binary version */
    case 8: *v = 232448; break; /* max dynamic shared */
    default: *v = 0; break;
    }
    return OK;
}
CUresult cuFuncSetAttribute(fake_func *f, int attr, int v) { (void)f; (void)attr; (void)v; return OK; }
CUresult cuFuncSetCacheConfig(fake_func *f, int c) { (void)f; (void)c; return OK; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, fake_func *f, int bs, size_t sm) {
    (void)f; (void)sm; *n = bs > 0 ? 2048 / bs : 1; if (*n > 32) *n = 32; if (*n < 1) *n = 1; return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, fake_func *f, int bs, size_t sm, unsigned fl) {
    (void)fl; return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, bs, sm);
}
CUresult cuOccupancyMaxPotentialBlockSize(int *grid, int *bs, fake_func *f, void *cb, size_t sm, int limit) {
    (void)f; (void)cb; (void)sm; int b = (limit > 0 && limit < 1024) ? limit : 1024; *bs = b; *grid = 132 * (2048 / b); return OK;
}
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *grid, int *bs, fake_func *f, void *cb, size_t sm, int limit, unsigned fl) {
    (void)fl; return cuOccupancyMaxPotentialBlockSize(grid, bs, f, cb, sm, limit);
}
/* FAKECUDA_POLLUTE=1: each launch runs fake_pollute (pollute.c, genpollute.py), code and
 * data of the driver's own that evict the program's from the caches, as a real launch's do. */
void fake_pollute(void);
static int pollute_on = -1;
CUresult cuLaunchKernel(fake_func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, fake_stream *s, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)params; (void)extra;
    if (pollute_on < 0) {
        const char *v = getenv("FAKECUDA_POLLUTE");
        pollute_on = v && v[0] == '1';
    }
    if (pollute_on) fake_pollute();
    return OK;
}
CUresult cuLaunchKernelEx(const void *cfg, fake_func *f, void **params, void **extra) { (void)cfg; (void)f; (void)params; (void)extra; return OK; }
CUresult cuLaunchCooperativeKernel(fake_func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                   unsigned shmem, fake_stream *s, void **params) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)s; (void)params; return OK;
}

/* ---- errors ---- */
static const char *err_name(int e) {
    switch (e) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR_FAKE";
    }
}
CUresult cuGetErrorName(int e, const char **s) { *s = err_name(e); return OK; }
CUresult cuGetErrorString(int e, const char **s) { *s = err_name(e); return OK; }
