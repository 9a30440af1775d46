/* Copy with non-temporal (streaming) stores: the destination's cache lines are written
 * without first being read (no read-for-ownership) and without evicting what is in cache.
 * For a large copy whose destination is not read again soon (an output buffer), that saves
 * one of the three passes over memory a plain copy makes. numpy and glibc's memcpy only
 * stream above a size threshold (glibc: 3/4 of the shared cache it reports; 240 MiB on
 * the machines here), so the shared-memory transport calls this for its large local copies.
 *
 * It also holds the small-message all-reduce (`LL`, below), whose hot loop (post, poll,
 * reduce) costs less than one Python call would.
 *
 * Built as an optional extension: without a compiler the package installs without it,
 * `gpucomm.runtime.memcopy` falls back to memmove and small all-reduces take the general
 * (interpreted) path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
#include <sys/uio.h>
#include <sched.h>
#define HAVE_FUTEX 1
#define yield_core() sched_yield()
#else
#define HAVE_FUTEX 0
#define yield_core() ((void)0)
#endif

#if defined(__SSE2__)
#include <emmintrin.h>

static void stream_copy(char *d, const char *s, size_t n)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;  /* streaming stores need 16-byte alignment */
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)63;  /* whole cache lines */
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence();  /* the stores are visible before a flag published after this call */
    memcpy(d + body, s + body, n - body);
}
#define STREAMING 1
#else
static void stream_copy(char *d, const char *s, size_t n) { memmove(d, s, n); }
#define STREAMING 0
#endif

/* ---------------------------------------------------------------------------------------
 * The small-message path (`shm_ll`): a one-shot all-reduce through cache lines that carry
 * their own sequence number, polled without system calls.
 *
 * Every rank owns an area of its control segment (mapped by every peer at start-up) with two
 * halves, used by calls of odd and even sequence numbers. A line is 64 bytes: 56 bytes of
 * data, then one 8-byte word `seq << 32 | tag`, stored after the data (release order), where
 * `tag` hashes what the call is (collective, dtype, op, element count) so two ranks calling
 * different things fail instead of reading each other's bytes. This is NCCL's LL/LL128 idea
 * on a CPU: the flag travels in the line it guards, so a reader polls the very line whose data
 * it then reads, and one line crosses between the cores per 56 bytes, no separate flag line.
 * A rank writes its input into its own half, then waits for each peer's lines of this call
 * and reduces in rank order 0..P-1 (the same order on every rank: bitwise-identical results).
 * Two halves suffice without any other synchronisation: a rank starting call s+2 has read
 * every peer's lines of call s+1, which each peer wrote after finishing call s.
 *
 * It also keeps the general protocol's words coherent: the call's descriptor and
 * `seq << 32` on entry, `seq << 32 | DONE` on exit, so calls of either kind mix.
 * --------------------------------------------------------------------------------------- */
#define LL_LINE 64
#define LL_DATA 56
#define LL_MAX_RANKS 64
#define LL_DONE 0xFFFFFFFFull
#define LL_INELIGIBLE (-1000)  /* not for this path: the caller takes the general one */

enum { T_F32, T_F64, T_I8, T_U8, T_I32, T_I64, T_F16, T_BF16, T_NTYPES };
enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_NOPS };
static const int type_size[T_NTYPES] = {4, 8, 1, 1, 4, 8, 2, 2};

typedef struct {
    PyObject_HEAD
    int rank, nranks;
    Py_ssize_t half;          /* bytes of one half of an area (a whole number of lines) */
    Py_ssize_t max_bytes;     /* the largest payload this path takes */
    int64_t *words;           /* this rank's control words */
    Py_ssize_t prog, desc;    /* word indices: progress counter, call descriptor */
    char *area[LL_MAX_RANKS]; /* rank q's area, as this process maps it */
    Py_buffer views[LL_MAX_RANKS];
    int nviews;
    uint64_t posted;          /* the seq whose input this rank has written (for resumed calls) */
    int64_t coll_id, algo_id; /* the call descriptor's ids (shm_control's numbering) */
    int64_t dtype_ids[T_NTYPES], op_ids[OP_NOPS + 1];
} LLObject;

static inline uint64_t load_acquire(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store_release(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* vDSO: no system call */
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#define REDUCE_LOOP(T, EXPR) do {                                                         \
        for (Py_ssize_t i = 0; i < k; i++) {                                              \
            T a = ((const T *)src[0])[i];                                                 \
            for (int q = 1; q < p; q++) {                                                 \
                T b = ((const T *)src[q])[i];                                             \
                a = (EXPR);                                                               \
            }                                                                             \
            ((T *)dst)[i] = a;                                                            \
        }                                                                                 \
    } while (0)

/* numpy's minimum/maximum propagate NaN: a NaN operand wins */
#define FMIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
#define FMAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))

/* float16 and bfloat16 reduce as the general path does (`dtypes.reduce_into`), as NCCL does:
 * each step widens both operands to float32, applies the op in float32 and rounds the result
 * back to nearest-even, so a P-rank sum is rounded P-1 times, in rank order. The conversions
 * are numpy's: float16 NaNs keep their payload (shifted), a payload that would vanish becomes
 * 1; bfloat16 is the upper half of a float32, NaNs made quiet (`dtypes.f32_to_bf16`). */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0x1f)
        x = sign | 0x7f800000u | m << 13;
    else if (e)
        x = sign | (e + 112) << 23 | m << 13;
    else if (m == 0)
        x = sign;
    else {  /* subnormal: m x 2^-24, normalised */
        uint32_t s = 0;
        while (!(m & 0x400)) {
            m <<= 1;
            s++;
        }
        x = sign | (113 - s) << 23 | (m & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {  /* NaN */
        uint16_t r = (uint16_t)(0x7c00u + ((ax & 0x7fffffu) >> 13));
        return sign | (r == 0x7c00u ? 0x7c01u : r);
    }
    if (ax >= 0x477ff000u)  /* 65520 and up (and inf) round to inf */
        return sign | 0x7c00u;
    if (ax >= 0x38800000u) {  /* a normal half: rebias, round the 13 dropped bits */
        uint32_t m = ax - 0x38000000u, r = m >> 13, rest = m & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (r & 1)))
            r++;  /* a carry into the exponent is right */
        return sign | (uint16_t)r;
    }
    uint32_t e = ax >> 23;  /* a subnormal half (or zero): round |f| x 2^24 */
    if (e < 102)  /* below 2^-25: rounds to zero */
        return sign;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t r = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1)))
        r++;
    return sign | (uint16_t)r;
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

#define REDUCE_HALF(TO32, FROM32, EXPR) do {                                              \
        for (Py_ssize_t i = 0; i < k; i++) {                                              \
            uint16_t acc = ((const uint16_t *)src[0])[i];                                 \
            for (int q = 1; q < p; q++) {                                                 \
                float a = TO32(acc), b = TO32(((const uint16_t *)src[q])[i]);             \
                acc = FROM32(EXPR);                                                       \
            }                                                                             \
            ((uint16_t *)dst)[i] = acc;                                                   \
        }                                                                                 \
    } while (0)

/* dst[0:k] = src[0] op src[1] op ... src[p-1], left to right, integers wrapping as numpy's */
static void reduce_line(int type, int op, char **src, int p, char *dst, Py_ssize_t k)
{
    switch (type * OP_NOPS + op) {
    case T_F32 * OP_NOPS + OP_SUM: REDUCE_LOOP(float, a + b); break;
    case T_F32 * OP_NOPS + OP_PROD: REDUCE_LOOP(float, a * b); break;
    case T_F32 * OP_NOPS + OP_MIN: REDUCE_LOOP(float, FMIN(a, b)); break;
    case T_F32 * OP_NOPS + OP_MAX: REDUCE_LOOP(float, FMAX(a, b)); break;
    case T_F64 * OP_NOPS + OP_SUM: REDUCE_LOOP(double, a + b); break;
    case T_F64 * OP_NOPS + OP_PROD: REDUCE_LOOP(double, a * b); break;
    case T_F64 * OP_NOPS + OP_MIN: REDUCE_LOOP(double, FMIN(a, b)); break;
    case T_F64 * OP_NOPS + OP_MAX: REDUCE_LOOP(double, FMAX(a, b)); break;
    case T_I8 * OP_NOPS + OP_SUM: REDUCE_LOOP(int8_t, (int8_t)(uint8_t)((uint8_t)a + (uint8_t)b)); break;
    case T_I8 * OP_NOPS + OP_PROD: REDUCE_LOOP(int8_t, (int8_t)(uint8_t)((unsigned)(uint8_t)a * (uint8_t)b)); break;
    case T_I8 * OP_NOPS + OP_MIN: REDUCE_LOOP(int8_t, IMIN(a, b)); break;
    case T_I8 * OP_NOPS + OP_MAX: REDUCE_LOOP(int8_t, IMAX(a, b)); break;
    case T_U8 * OP_NOPS + OP_SUM: REDUCE_LOOP(uint8_t, (uint8_t)(a + b)); break;
    case T_U8 * OP_NOPS + OP_PROD: REDUCE_LOOP(uint8_t, (uint8_t)((unsigned)a * b)); break;
    case T_U8 * OP_NOPS + OP_MIN: REDUCE_LOOP(uint8_t, IMIN(a, b)); break;
    case T_U8 * OP_NOPS + OP_MAX: REDUCE_LOOP(uint8_t, IMAX(a, b)); break;
    case T_I32 * OP_NOPS + OP_SUM: REDUCE_LOOP(int32_t, (int32_t)((uint32_t)a + (uint32_t)b)); break;
    case T_I32 * OP_NOPS + OP_PROD: REDUCE_LOOP(int32_t, (int32_t)((uint32_t)a * (uint32_t)b)); break;
    case T_I32 * OP_NOPS + OP_MIN: REDUCE_LOOP(int32_t, IMIN(a, b)); break;
    case T_I32 * OP_NOPS + OP_MAX: REDUCE_LOOP(int32_t, IMAX(a, b)); break;
    case T_I64 * OP_NOPS + OP_SUM: REDUCE_LOOP(int64_t, (int64_t)((uint64_t)a + (uint64_t)b)); break;
    case T_I64 * OP_NOPS + OP_PROD: REDUCE_LOOP(int64_t, (int64_t)((uint64_t)a * (uint64_t)b)); break;
    case T_I64 * OP_NOPS + OP_MIN: REDUCE_LOOP(int64_t, IMIN(a, b)); break;
    case T_I64 * OP_NOPS + OP_MAX: REDUCE_LOOP(int64_t, IMAX(a, b)); break;
    case T_F16 * OP_NOPS + OP_SUM: REDUCE_HALF(f16_to_f32, f32_to_f16, a + b); break;
    case T_F16 * OP_NOPS + OP_PROD: REDUCE_HALF(f16_to_f32, f32_to_f16, a * b); break;
    case T_F16 * OP_NOPS + OP_MIN: REDUCE_HALF(f16_to_f32, f32_to_f16, FMIN(a, b)); break;
    case T_F16 * OP_NOPS + OP_MAX: REDUCE_HALF(f16_to_f32, f32_to_f16, FMAX(a, b)); break;
    case T_BF16 * OP_NOPS + OP_SUM: REDUCE_HALF(bf16_to_f32, f32_to_bf16, a + b); break;
    case T_BF16 * OP_NOPS + OP_PROD: REDUCE_HALF(bf16_to_f32, f32_to_bf16, a * b); break;
    case T_BF16 * OP_NOPS + OP_MIN: REDUCE_HALF(bf16_to_f32, f32_to_bf16, FMIN(a, b)); break;
    case T_BF16 * OP_NOPS + OP_MAX: REDUCE_HALF(bf16_to_f32, f32_to_bf16, FMAX(a, b)); break;
    }
}

static void LL_release(LLObject *self)
{
    for (int i = 0; i < self->nviews; i++)
        PyBuffer_Release(&self->views[i]);
    self->nviews = 0;
    self->words = NULL;
}

static void LL_dealloc(LLObject *self)
{
    LL_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* LL(rank, segments, offset, half, max_bytes, prog_word, desc_word, ids): `segments` are
 * every rank's control segment (objects with a writable buffer, this rank's own included);
 * the areas start at byte `offset` of each. `ids`: the descriptor's collective id, algorithm
 * hash, the dtype ids of float32, float64, int8, uint8, int32, int64, float16, bfloat16 and
 * the op ids of sum, prod, min, max, avg (15 integers). */
static int LL_init(LLObject *self, PyObject *args, PyObject *kw)
{
    int rank;
    PyObject *segs;
    Py_ssize_t offset, half, max_bytes, prog, desc;
    long long ids[2 + T_NTYPES + OP_NOPS + 1];
    if (!PyArg_ParseTuple(args, "iOnnnnn(LLLLLLLLLLLLLLL):LL", &rank, &segs, &offset, &half,
                          &max_bytes, &prog, &desc, &ids[0], &ids[1], &ids[2], &ids[3],
                          &ids[4], &ids[5], &ids[6], &ids[7], &ids[8], &ids[9], &ids[10],
                          &ids[11], &ids[12], &ids[13], &ids[14]))
        return -1;
    self->coll_id = ids[0];
    self->algo_id = ids[1];
    for (int i = 0; i < T_NTYPES; i++)
        self->dtype_ids[i] = ids[2 + i];
    for (int i = 0; i <= OP_NOPS; i++)
        self->op_ids[i] = ids[2 + T_NTYPES + i];
    LL_release(self);
    PyObject *seq = PySequence_Fast(segs, "LL: segments must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t p = PySequence_Fast_GET_SIZE(seq);
    if (p < 1 || p > LL_MAX_RANKS || rank < 0 || rank >= p || half % LL_LINE || half <= 0 ||
        max_bytes < 0 || max_bytes > half / LL_LINE * LL_DATA || offset % LL_LINE) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "LL: bad rank, rank count or area geometry");
        return -1;
    }
    for (Py_ssize_t q = 0; q < p; q++) {
        Py_buffer *v = &self->views[q];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, q), v, PyBUF_WRITABLE) < 0) {
            Py_DECREF(seq);
            LL_release(self);
            return -1;
        }
        self->nviews = (int)q + 1;
        if (v->len < offset + 2 * half || (Py_ssize_t)(8 * (desc + 8)) > v->len) {
            Py_DECREF(seq);
            LL_release(self);
            PyErr_SetString(PyExc_ValueError, "LL: a segment is smaller than its area");
            return -1;
        }
        self->area[q] = (char *)v->buf + offset;
    }
    Py_DECREF(seq);
    self->rank = rank;
    self->nranks = (int)p;
    self->half = half;
    self->max_bytes = max_bytes;
    self->words = (int64_t *)self->views[rank].buf;
    self->prog = prog;
    self->desc = desc;
    self->posted = 0;
    return 0;
}

static inline uint32_t mix32(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

/* the buffer's element type; `bf16`: uint16 elements are bfloat16 (numpy has no such type) */
static int ctype_of(const char *fmt, Py_ssize_t itemsize, int bf16)
{
    if (fmt == NULL)
        return -1;
    if (*fmt == '<' || *fmt == '=' || *fmt == '@')
        fmt++;
    if (fmt[0] == 0 || fmt[1] != 0)
        return -1;
    switch (fmt[0]) {
    case 'f': return itemsize == 4 ? T_F32 : -1;
    case 'd': return itemsize == 8 ? T_F64 : -1;
    case 'b': return T_I8;
    case 'B': return T_U8;
    case 'i': return itemsize == 4 ? T_I32 : -1;
    case 'l': case 'q': return itemsize == 8 ? T_I64 : -1;
    case 'e': return itemsize == 2 ? T_F16 : -1;
    case 'H': return itemsize == 2 && bf16 ? T_BF16 : -1;
    }
    return -1;  /* bool, uint16 that is not bfloat16, ...: the general path */
}

/* d /= p in place, over n bytes of float `type`: an average's complete sum divided as
 * `dtypes.finish_avg` divides, bit for bit (by the exact reciprocal where p is a power of
 * two: the same bits; float16 and bfloat16 widened to float32, divided, rounded). */
#define DIVIDE(T) do {                                                                    \
        T *x = (T *)d, q = (T)p, inv = (T)1 / q;                                          \
        if (pow2)                                                                         \
            for (size_t i = 0; i < k; i++)                                                \
                x[i] *= inv;                                                              \
        else                                                                              \
            for (size_t i = 0; i < k; i++)                                                \
                x[i] /= q;                                                                \
    } while (0)

static void divide_row(char *d, size_t n, int type, int p)
{
    size_t k = n / (size_t)type_size[type];
    int pow2 = (p & (p - 1)) == 0;
    uint16_t *h = (uint16_t *)d;
    if (type == T_F32) {
        DIVIDE(float);
    } else if (type == T_F64) {
        DIVIDE(double);
    } else if (type == T_F16) {
        for (size_t i = 0; i < k; i++)
            h[i] = f32_to_f16(f16_to_f32(h[i]) / (float)p);
    } else if (type == T_BF16) {
        for (size_t i = 0; i < k; i++)
            h[i] = f32_to_bf16(bf16_to_f32(h[i]) / (float)p);
    }
}

static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};
#define OP_AVG 4

/* run(inp, out, seq, op, spin_ns, bf16) -> -1 done; q >= 0: still waiting for rank q (call
 * again with the same arguments to resume); -2 - q: rank q runs a different call;
 * LL_INELIGIBLE: not for this path (nothing was written: another dtype, op, size or a
 * non-contiguous or read-only buffer). `bf16`: uint16 buffers hold bfloat16. */
static PyObject *LL_run(LLObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "run(inp, out, seq, op, spin_ns, bf16)");
        return NULL;
    }
    if (self->words == NULL) {
        PyErr_SetString(PyExc_ValueError, "LL: closed");
        return NULL;
    }
    uint64_t seq = PyLong_AsUnsignedLongLong(args[2]);
    double spin_ns = PyFloat_AsDouble(args[4]);
    int bf16 = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred())
        return NULL;
    int op = -1;
    if (PyUnicode_Check(args[3]))
        for (int i = 0; i < 5; i++)
            if (PyUnicode_CompareWithASCIIString(args[3], op_names[i]) == 0) {
                op = i;
                break;
            }
    if (op < 0)
        return PyLong_FromLong(LL_INELIGIBLE);
    Py_buffer in, out;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return PyLong_FromLong(LL_INELIGIBLE);
    }
    if (PyObject_GetBuffer(args[1], &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        < 0) {
        PyErr_Clear();
        PyBuffer_Release(&in);
        return PyLong_FromLong(LL_INELIGIBLE);
    }
    long result = -1;
    int type = ctype_of(in.format, in.itemsize, bf16);
    Py_ssize_t n = in.len, isz = type < 0 ? 1 : type_size[type];
    int is_float = type == T_F32 || type == T_F64 || type == T_F16 || type == T_BF16;
    if (type < 0 || type != ctype_of(out.format, out.itemsize, bf16) || n != out.len ||
        n > self->max_bytes || (op == OP_AVG && !is_float)) {
        result = LL_INELIGIBLE;
        goto done;
    }
    int p = self->nranks, me = self->rank;
    Py_ssize_t lines = n ? (n + LL_DATA - 1) / LL_DATA : 1;
    uint64_t tag = mix32((uint64_t)type << 8 ^ (uint64_t)op ^ (uint64_t)n << 16 ^
                         0x9e3779b97f4a7c15ull);
    uint64_t flag = seq << 32 | tag;
    Py_ssize_t parity = (Py_ssize_t)(seq & 1) * self->half;
    if (self->posted != seq) {
        /* The descriptor's first word first (a peer checking the previous call's descriptor
         * re-reads it and so sees that this rank has moved on), the rest after it. */
        int64_t *w = self->words, *d = w + self->desc;
        const int64_t v[8] = {(int64_t)seq, self->coll_id, self->algo_id, p, 0, n / isz,
                              self->dtype_ids[type], self->op_ids[op]};
        for (int i = 0; i < 8; i++)
            __atomic_store_n(&d[i], v[i], __ATOMIC_RELEASE);
        __atomic_store_n(&w[self->prog], (int64_t)(seq << 32), __ATOMIC_RELEASE);
        char *mine = self->area[me] + parity;
        for (Py_ssize_t L = 0; L < lines; L++) {
            Py_ssize_t off = L * LL_DATA, m = n - off < LL_DATA ? n - off : LL_DATA;
            char *line = mine + L * LL_LINE;
            if (m > 0)
                memcpy(line, (const char *)in.buf + off, (size_t)m);
            store_release((uint64_t *)(line + LL_DATA), flag);
        }
        self->posted = seq;
    }
    /* wait for every peer's lines, reducing each line as soon as all ranks' copies are in;
     * give up (return to Python, which yields the core) after spin_ns without a new line:
     * a large payload whose lines keep arriving is progress, not a late peer */
    double deadline = 0;  /* 0: not spinning yet */
    char *src[LL_MAX_RANKS];
    for (Py_ssize_t L = 0; L < lines && result == -1; L++) {
        for (int q = 0; q < p; q++) {
            char *line = self->area[q] + parity + L * LL_LINE;
            src[q] = line;
            if (q == me)
                continue;
            const uint64_t *f = (const uint64_t *)(line + LL_DATA);
            unsigned spins = 0;
            uint64_t v;
            while (((v = load_acquire(f)) >> 32) != seq) {
                cpu_relax();
                if ((++spins & 63) == 0) {
                    double now = now_ns();
                    if (deadline == 0)
                        deadline = now + spin_ns;
                    else if (now >= deadline) {
                        result = q;
                        goto done;
                    }
                }
            }
            deadline = 0;  /* progress: a fresh budget for the next wait */
            if (v != flag) {
                result = -2 - q;
                goto done;
            }
        }
        Py_ssize_t off = L * LL_DATA, m = n - off < LL_DATA ? n - off : LL_DATA;
        if (m > 0)
            reduce_line(type, op == OP_AVG ? OP_SUM : op, src, p, (char *)out.buf + off,
                        m / isz);
    }
    if (op == OP_AVG)  /* as `dtypes.finish_avg` divides */
        divide_row((char *)out.buf, (size_t)n, type, p);
    __atomic_store_n(&self->words[self->prog], (int64_t)(seq << 32 | LL_DONE), __ATOMIC_RELEASE);
done:
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return PyLong_FromLong(result);
}

static PyObject *LL_close(LLObject *self, PyObject *unused)
{
    LL_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef LL_methods[] = {
    {"run", (PyCFunction)(void (*)(void))LL_run, METH_FASTCALL,
     "run(inp, out, seq, op, spin_ns, bf16): one all-reduce call (see the module source)."},
    {"close", (PyCFunction)LL_close, METH_NOARGS, "Release the mapped segments."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LLType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpucomm.runtime._stream.LL",
    .tp_basicsize = sizeof(LLObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The small-message all-reduce over self-flagged cache lines.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LL_init,
    .tp_dealloc = (destructor)LL_dealloc,
    .tp_methods = LL_methods,
};

/* ---------------------------------------------------------------------------------------
 * Blocking waits for the general path (`shm_wait`): a rank waiting for a peer's progress
 * counter sleeps in the kernel on that word (a futex on the shared control segment; the low
 * 32 bits of `seq << 32 | actions done`, which change with every publication), instead of
 * yielding the core or sleeping a fixed interval, and the peer wakes it when it publishes
 * (`publish`: the store, a full fence, then a wake if a peer's WAITING word names this rank).
 * A waiter that sleeps gives its core to whatever else runs there and is woken the moment the
 * counter moves; every sleep has a timeout, so publishers that do not wake (the small-message
 * path, point-to-point words) only cost latency, and Python checks liveness and the deadline
 * between sleeps.
 * --------------------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    int rank, nranks;
    Py_ssize_t prog, waiting;  /* word indices: progress counter, "blocked on rank q + 1" */
    Py_ssize_t in_addr, out_addr;  /* word indices: this call's input and output addresses */
    Py_ssize_t in_place;           /* word index: this call's input is its output */
    Py_ssize_t desc, gen, ack;  /* word indices: call descriptor (8 words), data segment
                                 * generation, generations of peers' segments mapped (+ q) */
    long pids[LL_MAX_RANKS];
    int64_t *words[LL_MAX_RANKS];
    char *peer_shm[LL_MAX_RANKS];  /* rank q's shared buffer as mapped here (`map_peer`) */
    Py_ssize_t peer_shm_len[LL_MAX_RANKS];
    Py_buffer views[LL_MAX_RANKS];
    int nviews;
    double yield_ns;  /* after the spin, yield the core this long before sleeping (set_yield) */
    char *piece_buf;  /* what a reduction read by cross-memory attach lands in (K_REDUCE_PEER) */
    size_t piece_len;
} WaitsObject;

static void Waits_release(WaitsObject *self)
{
    for (int i = 0; i < self->nviews; i++)
        PyBuffer_Release(&self->views[i]);
    self->nviews = 0;
    self->nranks = 0;
    memset(self->peer_shm, 0, sizeof self->peer_shm);
}

static void Waits_dealloc(WaitsObject *self)
{
    Waits_release(self);
    free(self->piece_buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Waits(rank, segments, pids, (prog, waiting, in_addr, out_addr, in_place, desc, gen, ack)):
 * `segments` are every rank's control segment (this rank's own included), `pids` every
 * rank's process id, then the word indices of the progress counter, the WAITING word, the
 * published input and output addresses, the in-place flag, the call descriptor (8 words), the
 * data segment's generation and the generations of peers' segments this rank mapped
 * (ack + q). */
static int Waits_init(WaitsObject *self, PyObject *args, PyObject *kw)
{
    int rank;
    PyObject *segs, *pids;
    Py_ssize_t prog, waiting, in_addr, out_addr, in_place, desc, gen, ack;
    if (!PyArg_ParseTuple(args, "iOO(nnnnnnnn):Waits", &rank, &segs, &pids, &prog, &waiting,
                          &in_addr, &out_addr, &in_place, &desc, &gen, &ack))
        return -1;
    Waits_release(self);
    PyObject *seq = PySequence_Fast(segs, "Waits: segments must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t p = PySequence_Fast_GET_SIZE(seq);
    if (p < 1 || p > LL_MAX_RANKS || rank < 0 || rank >= p || prog < 0 || waiting < 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "Waits: bad rank, rank count or word index");
        return -1;
    }
    Py_ssize_t top = prog;
    if (waiting > top) top = waiting;
    if (in_addr > top) top = in_addr;
    if (out_addr > top) top = out_addr;
    if (in_place > top) top = in_place;
    if (desc + 7 > top) top = desc + 7;
    if (gen > top) top = gen;
    if (ack + p - 1 > top) top = ack + p - 1;
    top = 8 * (top + 1);
    if (PySequence_Size(pids) != p || in_addr < 0 || out_addr < 0 || in_place < 0 || desc < 0 ||
        gen < 0 ||
        ack < 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "Waits: one pid per rank, word indices >= 0");
        return -1;
    }
    for (Py_ssize_t q = 0; q < p; q++) {
        PyObject *pid = PySequence_GetItem(pids, q);
        self->pids[q] = pid == NULL ? -1 : PyLong_AsLong(pid);
        Py_XDECREF(pid);
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    for (Py_ssize_t q = 0; q < p; q++) {
        Py_buffer *v = &self->views[q];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, q), v, PyBUF_WRITABLE) < 0) {
            Py_DECREF(seq);
            Waits_release(self);
            return -1;
        }
        self->nviews = (int)q + 1;
        if (v->len < top || ((uintptr_t)v->buf & 7)) {
            Py_DECREF(seq);
            Waits_release(self);
            PyErr_SetString(PyExc_ValueError, "Waits: a segment is too small or misaligned");
            return -1;
        }
        self->words[q] = (int64_t *)v->buf;
    }
    Py_DECREF(seq);
    self->rank = rank;
    self->nranks = (int)p;
    self->prog = prog;
    self->waiting = waiting;
    self->in_addr = in_addr;
    self->out_addr = out_addr;
    self->in_place = in_place;
    self->desc = desc;
    self->gen = gen;
    self->ack = ack;
    self->yield_ns = 0;
    return 0;
}

static inline long futex(void *addr, int op, uint32_t val, const struct timespec *ts)
{
#if HAVE_FUTEX
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
#else
    (void)addr; (void)op; (void)val; (void)ts;
    return 0;
#endif
}

static void publish(WaitsObject *self, int64_t v)
{
    int64_t *mine = &self->words[self->rank][self->prog];
    /* seq_cst: the store is visible before the WAITING words are read (a waiter stores its
     * WAITING word, then reads this counter: one of the two sees the other) */
    __atomic_store_n(mine, v, __ATOMIC_SEQ_CST);
    for (int q = 0; q < self->nranks; q++)
        if (q != self->rank &&
            __atomic_load_n(&self->words[q][self->waiting], __ATOMIC_SEQ_CST) == self->rank + 1) {
            futex(mine, FUTEX_WAKE, INT_MAX, NULL);
            break;
        }
}

/* publish(value): this rank's progress counter = value; wake a peer blocked on it. */
static PyObject *Waits_publish(WaitsObject *self, PyObject *arg)
{
    if (self->nranks == 0) {
        PyErr_SetString(PyExc_ValueError, "Waits: closed");
        return NULL;
    }
    long long v = PyLong_AsLongLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    publish(self, (int64_t)v);
    Py_RETURN_NONE;
}

/* wait(q, word, need, timeout_s) -> True once rank q's word `word` >= need, False if the
 * timeout passed first (or a wake-up came for another value): sleeps in the kernel, GIL
 * released. Marks this rank as blocked on q (its WAITING word) first. */
/* One wait on rank q's word `w`: this rank's WAITING word names q, then, unless the word
 * already holds `need` (1, no sleep), one sleep on its futex up to `ts` (0). WAITING is
 * stored before the word's load, as `publish` stores the word before reading WAITING: one of
 * the two sees the other (no lost wake-up). The caller clears WAITING. No GIL needed. */
static int mark_and_sleep(WaitsObject *self, int q, int64_t *w, int64_t need,
                          const struct timespec *ts)
{
    __atomic_store_n(&self->words[self->rank][self->waiting], (int64_t)q + 1, __ATOMIC_SEQ_CST);
    int64_t v = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    if (v >= need)
        return 1;
#if HAVE_FUTEX
    futex((void *)w, FUTEX_WAIT, (uint32_t)v, ts);  /* EAGAIN if it moved already: fine */
#else
    nanosleep(ts, NULL);
#endif
    return 0;
}

static PyObject *Waits_wait(WaitsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "wait(q, word, need, timeout_s)");
        return NULL;
    }
    int q = (int)PyLong_AsLong(args[0]);
    Py_ssize_t word = PyLong_AsSsize_t(args[1]);
    long long need = PyLong_AsLongLong(args[2]);
    double timeout = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (self->nranks == 0 || q < 0 || q >= self->nranks || word < 0 ||
        word >= self->views[q].len / 8 || !(timeout >= 0)) {
        PyErr_SetString(PyExc_ValueError, "Waits.wait: closed, or bad rank, word or timeout");
        return NULL;
    }
    int64_t *w = &self->words[q][word];
    struct timespec ts;
    ts.tv_sec = (time_t)timeout;
    ts.tv_nsec = (long)((timeout - (double)ts.tv_sec) * 1e9);
    int there;
    Py_BEGIN_ALLOW_THREADS
    there = mark_and_sleep(self, q, w, need, &ts);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(there || __atomic_load_n(w, __ATOMIC_ACQUIRE) >= need);
}

/* ---------------------------------------------------------------------------------------
 * Direct plans that only move bytes (`cplan`): this rank's actions of a compiled plan, run
 * here instead of one Python call each. A row of the program (int64):
 *   kind, peer, src loc, src offset, dst loc, dst offset, nbytes, first dep, dep count,
 *   count published after the row, push offset (COPY_PUSH)
 * offsets in bytes; locations as `actions.Loc` (SHM, IN, OUT: this rank's arrays, whose
 * addresses `run_plan` gets; PEER_IN, PEER_OUT: the peer's, as it published them); deps are
 * (peer, actions done) pairs in a second array. Each dependency is one load of the peer's
 * counter; a peer's first one in the call also compares its descriptor with this rank's. A
 * late peer is waited for here (spin, then sleep on its counter's futex, GIL released) for
 * up to `wait_ns`; beyond that, or where the descriptors differ (or the peer's shared buffer
 * grew), the call goes back to Python (`shm_wait`), which checks liveness and the deadline,
 * waits, reports, and calls again from that row: one C call per plan in the usual case.
 * --------------------------------------------------------------------------------------- */
enum { K_NOTHING, K_COPY, K_READ, K_WRITE, K_COPY_PUSH, K_REDUCE, K_SHARED_READ,
       K_SHARED_WRITE, K_REDUCE_PEER, K_REDUCE_PEER_PUSH };
/* Waits' interface: 2 = seven word indices, run_plan checks descriptors and sleeps itself;
 * 3 = eight (in_place too), `call` runs a whole call; 4 = shared transfers (rows 6, 7);
 * 5 = `set_yield`; 6 = reductions of what cross-memory attach reads (rows 8, 9) */
#define WAITS_VERSION 6
/* A shared transfer's pieces done, counted by the rank that did them: its progress line's
 * next two words, seq << 32 | pieces (`shm_control.FRONT`, `BACK`) */
#define FRONT 1
#define BACK 2
#define ROW 11

static int vm_copy(long pid, char *local, uint64_t remote, size_t n, int write)
{
#if defined(__linux__)
    while (n > 0) {
        struct iovec l = {local, n}, r = {(void *)(uintptr_t)remote, n};
        ssize_t got = write ? process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0)
                            : process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (got <= 0)
            return got < 0 ? errno : EIO;
        local += got;
        remote += (uint64_t)got;
        n -= (size_t)got;
    }
    return 0;
#else
    (void)pid; (void)local; (void)remote; (void)n; (void)write;
    return ENOSYS;
#endif
}

static void local_copy(char *d, const char *s, size_t n, long long stream_min)
{
    if (d == s || n == 0)
        return;  /* in place: the input already sits where the output goes */
    if (stream_min >= 0 && (long long)n >= stream_min && (d >= s + n || s >= d + n))
        stream_copy(d, s, n);
    else
        memmove(d, s, n);
}

/* Wait until rank q's progress counter >= need: spin `spin_ns`, then yield the core for
 * `yield_ns` (set where ranks outnumber their cores: the rank that gets it is likely the
 * peer), then sleep on the counter's futex (the peer wakes this rank when it publishes; each
 * sleep bounded, 50 us growing to 1 ms), for `wait_ns` in all. Returns 1 once it holds, 0 if
 * it still does not (Python then checks the peer's liveness and the deadline, and waits on).
 * Called without the GIL. */
static int wait_for(WaitsObject *self, int q, uint64_t need, double spin_ns, double wait_ns)
{
    const uint64_t *w = (const uint64_t *)&self->words[q][self->prog];
    double t0 = now_ns(), until = t0 + spin_ns, pause = 50e3;
    unsigned spins = 0;
    while (load_acquire(w) < need) {
        cpu_relax();
        if ((++spins & 63) == 0 && now_ns() >= until)
            break;
    }
    double yield_until = t0 + (self->yield_ns < wait_ns ? self->yield_ns : wait_ns);
    while (load_acquire(w) < need && now_ns() < yield_until)
        yield_core();
    int there = 0;
    while (!there && now_ns() - t0 < wait_ns) {
        struct timespec ts = {0, (long)pause};
        there = mark_and_sleep(self, q, (int64_t *)w, (int64_t)need, &ts);
        pause = pause * 1.5 < 1e6 ? pause * 1.5 : 1e6;
    }
    __atomic_store_n(&self->words[self->rank][self->waiting], 0, __ATOMIC_SEQ_CST);
    return there || load_acquire(w) >= need;
}

/* Rank q, which has entered call `seq`, runs the call this rank runs (its descriptor words
 * equal this rank's) or has moved on past it (its descriptor is being rewritten, first word
 * first, as `shm_wait.PeerWaits._check_peer` reads it): 1; 0 where Python must check (a
 * mismatch to report, or a grown shared buffer of q's to map). */
static int peer_agrees(WaitsObject *self, int q, uint64_t seq)
{
    const int64_t *theirs = self->words[q] + self->desc;
    const int64_t *mine = self->words[self->rank] + self->desc;
    int64_t first = __atomic_load_n(&theirs[0], __ATOMIC_ACQUIRE);
    int same = 1;
    for (int i = 1; i < 8; i++)
        same &= __atomic_load_n(&theirs[i], __ATOMIC_ACQUIRE) == mine[i];
    if (first != (int64_t)seq || __atomic_load_n(&theirs[0], __ATOMIC_ACQUIRE) != (int64_t)seq)
        return 1;
    return same && self->words[self->rank][self->ack + q] ==
                   __atomic_load_n(&self->words[q][self->gen], __ATOMIC_ACQUIRE);
}

/* Every dependency of a row, (peer, actions done) pairs: each peer's first one in the call
 * checks the peer's descriptor. 0: all hold; 1: Python waits for (or checks) peer *late. */
static int row_deps(WaitsObject *self, const int64_t *dp, int64_t first, int64_t count,
                    uint64_t seq, unsigned char *ok, double spin_ns, double wait_ns, int *late)
{
    for (int64_t j = first; j < first + count; j++) {
        int q = (int)dp[2 * j];
        int64_t k = dp[2 * j + 1];
        int there = 1;
        if (!ok[q]) {
            if (load_acquire((const uint64_t *)&self->words[q][self->prog]) < seq << 32) {
                Py_BEGIN_ALLOW_THREADS
                there = wait_for(self, q, seq << 32, spin_ns, wait_ns);
                Py_END_ALLOW_THREADS
            }
            if (!there || !peer_agrees(self, q, seq)) {
                *late = q;
                return 1;
            }
            ok[q] = 1;
        }
        uint64_t need = seq << 32 | (uint64_t)k;
        if (k == 0 || load_acquire((const uint64_t *)&self->words[q][self->prog]) >= need)
            continue;
        Py_BEGIN_ALLOW_THREADS
        there = wait_for(self, q, need, spin_ns, wait_ns);
        Py_END_ALLOW_THREADS
        if (!there) {
            *late = q;
            return 1;
        }
    }
    return 0;
}

/* One run of a program's rows from *row on: what `run_plan` and `call` share. */
typedef struct {
    const int64_t *rows, *dp;
    Py_ssize_t nrows, ndeps, piece;
    uint64_t seq;
    unsigned long long base[3];  /* this rank's shared buffer, input and output addresses */
    unsigned char *ok;           /* per peer: its descriptor was checked in this call */
    long long stream_min;
    double spin_ns, wait_ns;
} PlanRun;

/* A row's shape: its kind's locations (local 0-2: this rank's shared buffer, input, output;
 * 3: the peer's shared buffer, as mapped here; 4, 5: the peer's input and output, read or
 * written by cross-memory attach), its peer, dependency range and reduction; -1 (a Python
 * error) if malformed. */
static int row_shape(WaitsObject *self, const int64_t *r, Py_ssize_t ndeps)
{
    int64_t kind = r[0], peer = r[1];
    int local_src = r[2] >= 0 && r[2] <= 2, local_dst = r[4] >= 0 && r[4] <= 2;
    int shm_src = local_src || r[2] == 3;  /* a local copy or reduction may read a peer's */
    int peer_src = r[2] == 4 || r[2] == 5, peer_dst = r[4] == 5;
    int reduces = kind == K_REDUCE || kind == K_REDUCE_PEER || kind == K_REDUCE_PEER_PUSH;
    int rop = (int)(r[10] >> 4 & 0xF), rtype = (int)(r[10] >> 8 & 0xF);
    int red_ok = reduces && (r[10] & 0xF) <= 2 && rtype < T_NTYPES && r[10] >= 0 &&
                 (rop < OP_NOPS || (rop == OP_AVG && (rtype == T_F32 || rtype == T_F64 ||
                                                      rtype == T_F16 || rtype == T_BF16)));
    int shape = kind == K_NOTHING || (kind == K_COPY && shm_src && local_dst) ||
                ((kind == K_READ || kind == K_SHARED_READ) && peer_src && local_dst) ||
                ((kind == K_WRITE || kind == K_SHARED_WRITE) && local_src && peer_dst) ||
                (kind == K_COPY_PUSH && local_src && local_dst) ||
                (red_ok && kind == K_REDUCE && shm_src && local_dst) ||
                (red_ok && kind != K_REDUCE && peer_src && local_dst);
    int needs_peer = !(kind == K_NOTHING || ((kind == K_COPY || kind == K_REDUCE) && local_src));
    int shared = kind == K_SHARED_READ || kind == K_SHARED_WRITE;
    if (!shape || r[6] < 0 || r[7] < 0 || r[7] + r[8] > ndeps || (shared && r[10] < 1) ||
        (needs_peer && (peer < 0 || peer >= self->nranks))) {
        PyErr_SetString(PyExc_ValueError, "run_plan: a malformed row");
        return -1;
    }
    return 0;
}

/* The address of n bytes at byte offset `off` of local location `loc` (0-2: this rank's
 * arrays; 3: peer q's shared buffer as mapped here); NULL past the peer's buffer, or where
 * this rank has not mapped it. */
static char *operand(WaitsObject *self, const PlanRun *pr, int64_t loc, int64_t off,
                     int64_t q, size_t n)
{
    if (loc >= 0 && loc <= 2)
        return (char *)(uintptr_t)pr->base[loc] + off;
    if (loc == 3 && q >= 0 && q < self->nranks && self->peer_shm[q] != NULL && off >= 0 &&
        (size_t)off + n <= (size_t)self->peer_shm_len[q])
        return self->peer_shm[q] + off;
    return NULL;
}

#define REDUCE_TWO(T, EXPR) do {                                                          \
        const T *x = (const T *)a, *y = (const T *)b;                                     \
        T *w = (T *)z;                                                                    \
        for (size_t i = 0; i < k; i++) {                                                  \
            T u = x[i], v = y[i];                                                         \
            w[i] = (EXPR);                                                                \
        }                                                                                 \
    } while (0)

/* d = a op b over n bytes of `type` (numpy's ufunc(a, b, out=d), as `interpret` reduces);
 * through a buffer where d partly overlaps an operand (numpy copies then too). */
static int reduce_row(char *d, char *a, char *b, size_t n, int type, int op)
{
    size_t k = n / (size_t)type_size[type];
    char *tmp = NULL;
    if ((d != a && d < a + n && a < d + n) || (d != b && d < b + n && b < d + n)) {
        tmp = malloc(n ? n : 1);
        if (tmp == NULL)
            return ENOMEM;
    }
    char *z = tmp ? tmp : d;
    switch (type * OP_NOPS + op) {  /* the common ones, in loops the compiler vectorises */
    case T_F32 * OP_NOPS + OP_SUM: REDUCE_TWO(float, u + v); break;
    case T_F64 * OP_NOPS + OP_SUM: REDUCE_TWO(double, u + v); break;
    case T_F32 * OP_NOPS + OP_MAX: REDUCE_TWO(float, FMAX(u, v)); break;
    case T_F32 * OP_NOPS + OP_MIN: REDUCE_TWO(float, FMIN(u, v)); break;
    default: {
        char *src[2] = {a, b};
        reduce_line(type, op, src, 2, z, (Py_ssize_t)k);
    }
    }
    if (tmp) {
        memcpy(d, tmp, n);
        free(tmp);
    }
    return 0;
}

/* reduce_row with a row's op: AVG (an average's complete reduction) sums, then divides */
static int reduce_row_op(char *d, char *a, char *b, size_t n, int type, int op, int p)
{
    int err = reduce_row(d, a, b, n, type, op == OP_AVG ? OP_SUM : op);
    if (!err && op == OP_AVG)
        divide_row(d, n, type, p);
    return err;
}

/* Pieces of a shared transfer done in call `seq` by rank q, from word FRONT or BACK of its
 * progress line (0 while it still holds an earlier call's count). */
static inline size_t pieces_done(WaitsObject *self, int q, int word, uint64_t seq)
{
    uint64_t v = load_acquire((const uint64_t *)&self->words[q][self->prog + word]);
    return v >> 32 == (seq & 0xFFFFFFFFu) ? (size_t)(v & 0xFFFFFFFFu) : 0;
}

/* A shared transfer (`push.share_transfers`): n bytes of peer q's buffer at `remote` into
 * this rank's `dst`, in pieces of `piece` bytes read from the front, while the peer writes
 * pieces from the back once it has nothing else left (`shared_write`). FRONT counts the
 * pieces read, BACK the pieces the peer has taken (before it writes them): this rank stops
 * where those begin, and the plan's last wait (for the peer's write row) keeps the call open
 * until they are written. Where the two race for a piece, both copy it: the same bytes. */
static int shared_read(WaitsObject *self, uint64_t seq, int q, char *dst, uint64_t remote,
                       size_t n, size_t piece)
{
    size_t np = (n + piece - 1) / piece;
    int64_t *front = &self->words[self->rank][self->prog + FRONT];
    for (size_t k = 0; k + pieces_done(self, q, BACK, seq) < np; k++) {
        size_t off = k * piece, m = n - off < piece ? n - off : piece;
        int err = vm_copy(self->pids[q], dst + off, remote + off, m, 0);
        if (err)
            return err;
        __atomic_store_n(front, (int64_t)((seq & 0xFFFFFFFFu) << 32 | (k + 1)),
                         __ATOMIC_RELEASE);
    }
    return 0;
}

/* The other side of peer q's shared read: this rank's `src` into q at `remote`, from the
 * last piece down, each taken (BACK) before it is written, while it lies beyond the piece q
 * is reading now. */
static int shared_write(WaitsObject *self, uint64_t seq, int q, const char *src,
                        uint64_t remote, size_t n, size_t piece)
{
    size_t np = (n + piece - 1) / piece;
    int64_t *back = &self->words[self->rank][self->prog + BACK];
    for (size_t j = 0; pieces_done(self, q, FRONT, seq) + j + 2 <= np; j++) {
        size_t off = (np - 1 - j) * piece, m = n - off < piece ? n - off : piece;
        __atomic_store_n(back, (int64_t)((seq & 0xFFFFFFFFu) << 32 | (j + 1)),
                         __ATOMIC_SEQ_CST);
        int err = vm_copy(self->pids[q], (char *)src + off, remote + off, m, 1);
        if (err)
            return err;
    }
    return 0;
}

/* status 0: every row done; 1: row *row waits for peer *detail (late beyond wait_ns, or its
 * descriptor for Python to check); 2: row *row failed to copy from or to peer *detail >> 16
 * with errno *detail & 0xffff; -1: a malformed row (exception set). */
static int run_rows(WaitsObject *self, const PlanRun *pr, Py_ssize_t *row, long long *detail)
{
    int p = self->nranks;
    for (Py_ssize_t i = *row; i < pr->nrows; i++, *row = i) {
        const int64_t *r = pr->rows + i * ROW;
        int64_t kind = r[0], peer = r[1];
        if (row_shape(self, r, pr->ndeps) < 0)
            return -1;
        for (int64_t j = r[7]; j < r[7] + r[8]; j++)
            if (pr->dp[2 * j] < 0 || pr->dp[2 * j] >= p || pr->dp[2 * j + 1] < 0) {
                PyErr_SetString(PyExc_ValueError, "run_plan: a malformed dependency");
                return -1;
            }
        int late = 0;
        if (row_deps(self, pr->dp, r[7], r[8], pr->seq, pr->ok, pr->spin_ns, pr->wait_ns,
                     &late)) {
            *detail = late;
            return 1;
        }
        /* a reduction fused with the next row, the push of what it reduces (`push_results`):
         * that row's dependencies too, before the first piece */
        const int64_t *r2 = kind == K_REDUCE_PEER_PUSH && i + 1 < pr->nrows ? r + ROW : NULL;
        if (kind == K_REDUCE_PEER_PUSH) {
            if (r2 == NULL || r2[0] != K_WRITE || row_shape(self, r2, pr->ndeps) < 0 ||
                r2[6] != r[6]) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "run_plan: a fused reduction without "
                                    "its push");
                return -1;
            }
            if (row_deps(self, pr->dp, r2[7], r2[8], pr->seq, pr->ok, pr->spin_ns,
                         pr->wait_ns, &late)) {
                *detail = late;
                return 1;
            }
        }
        char *src = NULL, *dst = NULL, *cur = NULL;
        uint64_t remote = 0, remote2 = 0;
        size_t n = kind == K_NOTHING ? 0 : (size_t)r[6];
        int peer_reduce = kind == K_REDUCE_PEER || kind == K_REDUCE_PEER_PUSH;
        int reads = kind == K_READ || kind == K_SHARED_READ || peer_reduce;
        int writes = kind == K_WRITE || kind == K_SHARED_WRITE;
        if (reads)
            remote = (uint64_t)self->words[peer][r[2] == 4 ? self->in_addr : self->out_addr]
                     + (uint64_t)r[3];
        else if (kind != K_NOTHING)
            src = operand(self, pr, r[2], r[3], peer, n);
        if (writes)
            remote = (uint64_t)self->words[peer][self->out_addr] + (uint64_t)r[5];
        else if (kind != K_NOTHING)
            dst = operand(self, pr, r[4], r[5], peer, n);
        if (kind == K_REDUCE || peer_reduce)
            cur = operand(self, pr, r[10] & 0xF, r[10] >> 12, peer, n);
        if (r2 != NULL)
            remote2 = (uint64_t)self->words[r2[1]][self->out_addr] + (uint64_t)r2[5];
        size_t piece = (size_t)pr->piece;
        if (peer_reduce && self->piece_len < piece) {
            free(self->piece_buf);
            self->piece_len = 0;
            if ((self->piece_buf = malloc(piece)) == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            self->piece_len = piece;
        }
        if (kind != K_NOTHING && ((!reads && src == NULL) ||
                                  (!writes && dst == NULL) ||
                                  ((kind == K_REDUCE || peer_reduce) && cur == NULL))) {
            PyErr_Format(PyExc_ValueError, "run_plan: row %zd reads past rank %d's shared "
                         "buffer, or one not mapped", i, (int)peer);
            return -1;
        }
        int err = 0;
        long long stream_min = pr->stream_min;
        Py_BEGIN_ALLOW_THREADS
        switch (kind) {
        case K_COPY:
            local_copy(dst, src, n, stream_min);
            break;
        case K_READ:
            err = vm_copy(self->pids[peer], dst, remote, n, 0);
            break;
        case K_WRITE:
            err = vm_copy(self->pids[peer], src, remote, n, 1);
            break;
        case K_COPY_PUSH:  /* each piece copied, then written to the peer while cached */
            remote = (uint64_t)self->words[peer][self->out_addr] + (uint64_t)r[10];
            if (src == dst) {
                err = vm_copy(self->pids[peer], src, remote, n, 1);
                break;
            }
            for (size_t j = 0; j < n && !err; j += piece) {
                size_t m = n - j < piece ? n - j : piece;
                local_copy(dst + j, src + j, m, stream_min);
                err = vm_copy(self->pids[peer], src + j, remote + j, m, 1);
            }
            break;
        case K_REDUCE:
            err = reduce_row_op(dst, cur, src, n, (int)(r[10] >> 8 & 0xF),
                                (int)(r[10] >> 4 & 0xF), p);
            break;
        case K_SHARED_READ:
            err = shared_read(self, pr->seq, (int)peer, dst, remote, n, (size_t)r[10]);
            break;
        case K_SHARED_WRITE:
            err = shared_write(self, pr->seq, (int)peer, src, remote, n, (size_t)r[10]);
            break;
        case K_REDUCE_PEER:
        case K_REDUCE_PEER_PUSH:
            /* piece by piece through a cache-sized buffer: the peer's piece read into it,
             * reduced with the current value into dst (numpy's ufunc(cur, piece) order), and,
             * fused, written into the peer's output while it is still in cache */
            for (size_t j = 0; j < n && !err; j += piece) {
                size_t m = n - j < piece ? n - j : piece;
                err = vm_copy(self->pids[peer], self->piece_buf, remote + j, m, 0);
                if (!err)
                    err = reduce_row_op(dst + j, cur + j, self->piece_buf, m,
                                        (int)(r[10] >> 8 & 0xF), (int)(r[10] >> 4 & 0xF), p);
                if (!err && r2 != NULL)
                    err = vm_copy(self->pids[r2[1]], dst + j, remote2 + j, m, 1);
            }
            break;
        }
        Py_END_ALLOW_THREADS
        if (err) {
            *detail = peer << 16 | (err & 0xffff);
            return 2;
        }
        if (r2 != NULL) {  /* the push ran with the reduction: both are done */
            r = r2;
            *row = ++i;
        }
        publish(self, (int64_t)(pr->seq << 32 | (uint64_t)r[9]));
    }
    *row = pr->nrows;
    return 0;
}

/* The program and dependency arrays of a PlanRun, as buffers (released by the caller). */
static int plan_buffers(PyObject *prog_obj, PyObject *deps_obj, Py_buffer *prog,
                        Py_buffer *deps, PlanRun *pr)
{
    if (PyObject_GetBuffer(prog_obj, prog, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (PyObject_GetBuffer(deps_obj, deps, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(prog);
        return -1;
    }
    pr->rows = prog->buf;
    pr->dp = deps->buf;
    pr->nrows = prog->len / (8 * ROW);
    pr->ndeps = deps->len / 16;
    return 0;
}

/* run_plan(prog, deps, start, seq, (shm, in, out), checked, stream_min, piece, spin_ns,
 * wait_ns) -> (status, row, detail): status 0: done; 1: row `row` waits for peer `detail`
 * (late beyond `wait_ns`, or its descriptor for Python to check: Python waits, checks, then
 * calls again from `row`); 2: row `row` failed to copy from or to peer `detail >> 16` with
 * errno `detail & 0xffff`. */
static PyObject *Waits_run_plan(WaitsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "run_plan(prog, deps, start, seq, addrs, checked, stream_min, piece, "
                        "spin_ns, wait_ns)");
        return NULL;
    }
    PlanRun pr;
    Py_ssize_t row = PyLong_AsSsize_t(args[2]);
    pr.seq = PyLong_AsUnsignedLongLong(args[3]);
    pr.stream_min = PyLong_AsLongLong(args[6]);
    pr.piece = PyLong_AsSsize_t(args[7]);
    pr.spin_ns = PyFloat_AsDouble(args[8]);
    pr.wait_ns = PyFloat_AsDouble(args[9]);
    if (PyErr_Occurred() ||
        !PyArg_ParseTuple(args[4], "KKK", &pr.base[0], &pr.base[1], &pr.base[2]))
        return NULL;
    if (self->nranks == 0 || pr.piece <= 0) {
        PyErr_SetString(PyExc_ValueError, "run_plan: closed, or piece <= 0");
        return NULL;
    }
    Py_buffer prog, deps, checked;
    if (plan_buffers(args[0], args[1], &prog, &deps, &pr) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[5], &checked, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&prog);
        PyBuffer_Release(&deps);
        return NULL;
    }
    pr.ok = checked.buf;
    int status = -1;
    long long detail = 0;
    if (checked.len < self->nranks || row < 0)
        PyErr_SetString(PyExc_ValueError, "run_plan: bad start row or checked flags");
    else
        status = run_rows(self, &pr, &row, &detail);
    PyBuffer_Release(&prog);
    PyBuffer_Release(&deps);
    PyBuffer_Release(&checked);
    if (status < 0)
        return NULL;
    return Py_BuildValue("(inL)", status, row, detail);
}

/* ---------------------------------------------------------------------------------------
 * A whole call of a cached C program (`shm_fast`): entry, rows and end in one C call. What
 * `ShmTransport._enter` and `_finish` do around `run_plan` in Python, here: wait (where the
 * previous call's plan had peers read this rank's shared buffer) until every peer ended call
 * seq - 1; publish the descriptor, buffer addresses and `seq << 32`; run the rows; check every
 * peer not yet checked (entered this call, same descriptor); publish `seq << 32 | DONE`. Any
 * step C cannot finish goes back to Python at that step (see CALL_*), which ends the call
 * exactly as the general path would.
 * --------------------------------------------------------------------------------------- */
enum { CALL_DONE, CALL_ROW_WAITS, CALL_ROW_FAILED, CALL_END_WAITS, CALL_NOT_ENTERED };

/* A buffer's address and length (`obj` None: no buffer, address `none`); 0, or -1 with a
 * Python error, or 1 where the buffer is not C-contiguous (and writable, for an output). */
static int call_buffer(PyObject *obj, int writable, long long none, long long *addr,
                       Py_ssize_t *len)
{
    if (obj == Py_None) {
        *addr = none;
        *len = -1;
        return 0;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 1;
    }
    *addr = (long long)(uintptr_t)v.buf;
    *len = v.len;
    PyBuffer_Release(&v);
    return 0;
}

/* Wait for every peer's end of call seq - 1 (within wait_ns): 1 if they all ended. */
static int previous_ended(WaitsObject *self, uint64_t seq, double spin_ns, double wait_ns)
{
    uint64_t need = (seq - 1) << 32 | LL_DONE;
    for (int q = 0; q < self->nranks; q++) {
        if (q == self->rank ||
            load_acquire((const uint64_t *)&self->words[q][self->prog]) >= need)
            continue;
        int there;
        Py_BEGIN_ALLOW_THREADS
        there = wait_for(self, q, need, spin_ns, wait_ns);
        Py_END_ALLOW_THREADS
        if (!there)
            return 0;
    }
    return 1;
}

/* Publish call seq's descriptor (desc[1:8]; word 0 = seq, written first, as Python does),
 * the buffer addresses, and `seq << 32`. */
static void enter_call(WaitsObject *self, uint64_t seq, const int64_t *desc, long long in_addr,
                       long long out_addr)
{
    int64_t *mine = self->words[self->rank];
    __atomic_store_n(&mine[self->desc], (int64_t)seq, __ATOMIC_RELEASE);
    for (int i = 1; i < 8; i++)
        __atomic_store_n(&mine[self->desc + i], desc[i], __ATOMIC_RELEASE);
    __atomic_store_n(&mine[self->in_addr], (int64_t)in_addr, __ATOMIC_RELEASE);
    __atomic_store_n(&mine[self->out_addr], (int64_t)out_addr, __ATOMIC_RELEASE);
    __atomic_store_n(&mine[self->in_place], (int64_t)(in_addr == out_addr), __ATOMIC_RELEASE);
    publish(self, (int64_t)(seq << 32));
}

/* Every peer not yet checked entered call seq with this rank's descriptor: -1 if so, else
 * the first one that is late (beyond wait_ns) or for Python to check. */
static int end_checks(WaitsObject *self, const PlanRun *pr)
{
    for (int q = 0; q < self->nranks; q++) {
        if (pr->ok[q])
            continue;
        int there = 1;
        if (load_acquire((const uint64_t *)&self->words[q][self->prog]) < pr->seq << 32) {
            Py_BEGIN_ALLOW_THREADS
            there = wait_for(self, q, pr->seq << 32, pr->spin_ns, pr->wait_ns);
            Py_END_ALLOW_THREADS
        }
        if (!there || !peer_agrees(self, q, pr->seq))
            return q;
        pr->ok[q] = 1;
    }
    return -1;
}
/* call(spec, seq, inp, out, wait_previous, checked) -> (status, row, detail), spec =
 * (prog, deps, desc, in_bytes, out_bytes, alias, shm, stream_min, piece, spin_ns, wait_ns):
 * call `seq` of the program (as run_plan's), whose descriptor is desc[1:8] (int64 array of
 * 8), on `inp` and `out` (None where the rank has none; C-contiguous, of in_bytes and
 * out_bytes; overlapping only where in - out == alias, the plan's in-place layout), this
 * rank's shared buffer at `shm`. `checked`: bytearray, one flag per rank, set here. Status
 * CALL_DONE: the call ended (DONE published); CALL_NOT_ENTERED: nothing happened (buffers
 * not as the spec says, or a peer still in call seq - 1 after wait_ns): the caller takes the
 * general path; CALL_ROW_WAITS / CALL_ROW_FAILED: as run_plan's 1 and 2 (entered); and
 * CALL_END_WAITS: every row done, peer `detail` for Python to wait for and check. */
static PyObject *Waits_call(WaitsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *prog_obj, *deps_obj, *desc_obj;
    Py_ssize_t in_bytes, out_bytes, in_len, out_len;
    long long alias, in_addr, out_addr;
    PlanRun pr;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "call(spec, seq, inp, out, wait_previous, checked)");
        return NULL;
    }
    if (!PyArg_ParseTuple(args[0], "OOOnnLKLndd:call", &prog_obj, &deps_obj, &desc_obj,
                          &in_bytes, &out_bytes, &alias, &pr.base[0], &pr.stream_min,
                          &pr.piece, &pr.spin_ns, &pr.wait_ns))
        return NULL;
    pr.seq = PyLong_AsUnsignedLongLong(args[1]);
    int wait_prev = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred() || wait_prev < 0)
        return NULL;
    if (self->nranks == 0 || pr.piece <= 0 || pr.seq < 1) {
        PyErr_SetString(PyExc_ValueError, "call: closed, piece <= 0 or seq < 1");
        return NULL;
    }
    int bad = call_buffer(args[2], 0, -1, &in_addr, &in_len);
    if (bad == 0)
        bad = call_buffer(args[3], 1, -2, &out_addr, &out_len);
    if (bad < 0)
        return NULL;
    if (bad || in_len != in_bytes || out_len != out_bytes ||
        (in_len > 0 && out_len > 0 && in_addr < out_addr + out_len &&
         out_addr < in_addr + in_len && in_addr - out_addr != alias))
        return Py_BuildValue("(inL)", CALL_NOT_ENTERED, (Py_ssize_t)0, 0LL);
    pr.base[1] = in_addr < 0 ? 0 : (unsigned long long)in_addr;
    pr.base[2] = out_addr < 0 ? 0 : (unsigned long long)out_addr;
    Py_buffer prog, deps, desc, checked;
    if (plan_buffers(prog_obj, deps_obj, &prog, &deps, &pr) < 0)
        return NULL;
    if (PyObject_GetBuffer(desc_obj, &desc, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&prog);
        PyBuffer_Release(&deps);
        return NULL;
    }
    if (PyObject_GetBuffer(args[5], &checked, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&prog);
        PyBuffer_Release(&deps);
        PyBuffer_Release(&desc);
        return NULL;
    }
    int status = -1;
    Py_ssize_t row = 0;
    long long detail = 0;
    pr.ok = checked.buf;
    if (checked.len < self->nranks || desc.len != 64) {
        PyErr_SetString(PyExc_ValueError, "call: bad checked flags or descriptor");
    } else if (wait_prev && !previous_ended(self, pr.seq, pr.spin_ns, pr.wait_ns)) {
        status = CALL_NOT_ENTERED;
    } else {
        memset(pr.ok, 0, (size_t)self->nranks);
        pr.ok[self->rank] = 1;
        enter_call(self, pr.seq, desc.buf, in_addr, out_addr);
        status = run_rows(self, &pr, &row, &detail);
        if (status == 0) {
            int q = end_checks(self, &pr);
            if (q >= 0) {
                status = CALL_END_WAITS;
                detail = q;
            } else {
                publish(self, (int64_t)(pr.seq << 32 | LL_DONE));
            }
        }
    }
    PyBuffer_Release(&prog);
    PyBuffer_Release(&deps);
    PyBuffer_Release(&desc);
    PyBuffer_Release(&checked);
    if (status < 0)
        return NULL;
    return Py_BuildValue("(inL)", status, row, detail);
}

/* map_peer(q, buffer): rank q's shared buffer as this process maps it now (what rows of
 * location 3 read; the Python owner keeps it mapped until the next call for q). */
static PyObject *Waits_map_peer(WaitsObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "map_peer(q, buffer)");
        return NULL;
    }
    int q = (int)PyLong_AsLong(args[0]);
    if (PyErr_Occurred())
        return NULL;
    if (self->nranks == 0 || q < 0 || q >= self->nranks) {
        PyErr_SetString(PyExc_ValueError, "map_peer: closed, or not a rank");
        return NULL;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(args[1], &v, PyBUF_SIMPLE) < 0)
        return NULL;
    self->peer_shm[q] = v.buf;
    self->peer_shm_len[q] = v.len;
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

/* set_yield(ns): how long a wait yields the core before it sleeps (0: it does not). */
static PyObject *Waits_set_yield(WaitsObject *self, PyObject *arg)
{
    double ns = PyFloat_AsDouble(arg);
    if (ns == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(ns >= 0 && ns <= 1e9)) {
        PyErr_SetString(PyExc_ValueError, "Waits.set_yield: 0 to 1e9 ns");
        return NULL;
    }
    self->yield_ns = ns;
    Py_RETURN_NONE;
}

static PyObject *Waits_close(WaitsObject *self, PyObject *unused)
{
    Waits_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef Waits_methods[] = {
    {"publish", (PyCFunction)Waits_publish, METH_O,
     "publish(value): store this rank's progress counter and wake a peer blocked on it."},
    {"wait", (PyCFunction)(void (*)(void))Waits_wait, METH_FASTCALL,
     "wait(q, word, need, timeout_s) -> bool: sleep until rank q's word >= need, or the "
     "timeout."},
    {"run_plan", (PyCFunction)(void (*)(void))Waits_run_plan, METH_FASTCALL,
     "run_plan(prog, deps, start, seq, addrs, checked, stream_min, piece, spin_ns, wait_ns) "
     "-> (status, row, detail): this rank's copy-only actions (see the source)."},
    {"call", (PyCFunction)(void (*)(void))Waits_call, METH_FASTCALL,
     "call(spec, seq, inp, out, wait_previous, checked) -> (status, row, detail): a whole "
     "call of a C program: entry, rows, end checks (see the source)."},
    {"map_peer", (PyCFunction)(void (*)(void))Waits_map_peer, METH_FASTCALL,
     "map_peer(q, buffer): rank q's shared buffer, as mapped here, for rows that read it."},
    {"set_yield", (PyCFunction)Waits_set_yield, METH_O,
     "set_yield(ns): after its spin, a wait yields the core this long before it sleeps."},
    {"close", (PyCFunction)Waits_close, METH_NOARGS, "Release the mapped segments."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WaitsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpucomm.runtime._stream.Waits",
    .tp_basicsize = sizeof(WaitsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Blocking waits on peers' progress counters (futexes on the control segments).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Waits_init,
    .tp_dealloc = (destructor)Waits_dealloc,
    .tp_methods = Waits_methods,
};

static PyObject *copy(PyObject *self, PyObject *args)
{
    unsigned long long dst, src;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "KKn:copy", &dst, &src, &n))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "copy: nbytes must be >= 0");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    stream_copy((char *)(uintptr_t)dst, (const char *)(uintptr_t)src, (size_t)n);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* address(buffer) -> int: where a contiguous buffer's bytes start (numpy's
 * __array_interface__ builds a dict on every call: microseconds, several per collective) */
static PyObject *address(PyObject *self, PyObject *obj)
{
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    void *p = v.buf;
    PyBuffer_Release(&v);
    return PyLong_FromVoidPtr(p);
}

static PyMethodDef methods[] = {
    {"address", address, METH_O,
     "address(buffer) -> int: the address of a contiguous buffer's first byte."},
    {"copy", copy, METH_VARARGS,
     "copy(dst_addr, src_addr, nbytes): copy nbytes between non-overlapping addresses with "
     "non-temporal stores."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stream", "Non-temporal memory copy; the small-message all-reduce.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__stream(void)
{
    if (PyType_Ready(&LLType) < 0 || PyType_Ready(&WaitsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LLType);
    Py_INCREF(&WaitsType);
    if (PyModule_AddIntConstant(m, "STREAMING", STREAMING) < 0 ||
        PyModule_AddIntConstant(m, "LL_INELIGIBLE", LL_INELIGIBLE) < 0 ||
        PyModule_AddIntConstant(m, "LL_LINE", LL_LINE) < 0 ||
        PyModule_AddIntConstant(m, "LL_DATA", LL_DATA) < 0 ||
        PyModule_AddIntConstant(m, "WAITS_VERSION", WAITS_VERSION) < 0 ||
        PyModule_AddObject(m, "LL", (PyObject *)&LLType) < 0 ||
        PyModule_AddObject(m, "Waits", (PyObject *)&WaitsType) < 0) {
        Py_DECREF(&LLType);
        Py_DECREF(&WaitsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
