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

enum { T_F32, T_F64, T_I8, T_U8, T_I32, T_I64, T_NTYPES };
enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_NOPS };
static const int type_size[T_NTYPES] = {4, 8, 1, 1, 4, 8};

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
 * hash, the dtype ids of float32, float64, int8, uint8, int32, int64 and the op ids of sum,
 * prod, min, max, avg (13 integers). */
static int LL_init(LLObject *self, PyObject *args, PyObject *kw)
{
    int rank;
    PyObject *segs;
    Py_ssize_t offset, half, max_bytes, prog, desc;
    long long ids[2 + T_NTYPES + OP_NOPS + 1];
    if (!PyArg_ParseTuple(args, "iOnnnnn(LLLLLLLLLLLLL):LL", &rank, &segs, &offset, &half,
                          &max_bytes, &prog, &desc, &ids[0], &ids[1], &ids[2], &ids[3],
                          &ids[4], &ids[5], &ids[6], &ids[7], &ids[8], &ids[9], &ids[10],
                          &ids[11], &ids[12]))
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

static int ctype_of(const char *fmt, Py_ssize_t itemsize)
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
    }
    return -1;  /* float16, bfloat16 (uint16), bool, ...: the general path */
}

static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};
#define OP_AVG 4

/* run(inp, out, seq, op, spin_ns) -> -1 done; q >= 0: still waiting for rank q (call again
 * with the same arguments to resume); -2 - q: rank q runs a different call; LL_INELIGIBLE:
 * not for this path (nothing was written: another dtype, op, size or a non-contiguous or
 * read-only buffer). */
static PyObject *LL_run(LLObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "run(inp, out, seq, op, spin_ns)");
        return NULL;
    }
    if (self->words == NULL) {
        PyErr_SetString(PyExc_ValueError, "LL: closed");
        return NULL;
    }
    uint64_t seq = PyLong_AsUnsignedLongLong(args[2]);
    double spin_ns = PyFloat_AsDouble(args[4]);
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
    int type = ctype_of(in.format, in.itemsize);
    Py_ssize_t n = in.len, isz = type < 0 ? 1 : type_size[type];
    if (type < 0 || type != ctype_of(out.format, out.itemsize) || n != out.len ||
        n > self->max_bytes || (op == OP_AVG && type != T_F32 && type != T_F64)) {
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
    if (op == OP_AVG) {  /* as numpy divides a float32 (float64) array by float32(p) */
        Py_ssize_t k = n / isz;
        if (type == T_F32)
            for (Py_ssize_t i = 0; i < k; i++)
                ((float *)out.buf)[i] = ((float *)out.buf)[i] / (float)p;
        else
            for (Py_ssize_t i = 0; i < k; i++)
                ((double *)out.buf)[i] = ((double *)out.buf)[i] / (double)p;
    }
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
     "run(inp, out, seq, op, spin_ns): one all-reduce call (see the module source)."},
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

static PyMethodDef methods[] = {
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
    if (PyType_Ready(&LLType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&LLType);
    if (PyModule_AddIntConstant(m, "STREAMING", STREAMING) < 0 ||
        PyModule_AddIntConstant(m, "LL_INELIGIBLE", LL_INELIGIBLE) < 0 ||
        PyModule_AddIntConstant(m, "LL_LINE", LL_LINE) < 0 ||
        PyModule_AddIntConstant(m, "LL_DATA", LL_DATA) < 0 ||
        PyModule_AddObject(m, "LL", (PyObject *)&LLType) < 0) {
        Py_DECREF(&LLType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
