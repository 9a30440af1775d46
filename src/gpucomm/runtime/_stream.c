/* Copy with non-temporal (streaming) stores: the destination's cache lines are written
 * without first being read (no read-for-ownership) and without evicting what is in cache.
 * For a large copy whose destination is not read again soon (an output buffer), that saves
 * one of the three passes over memory a plain copy makes. numpy and glibc's memcpy only
 * stream above a size threshold (glibc: 3/4 of the shared cache it reports; 240 MiB on
 * the machines here), so the shared-memory transport calls this for its large local copies.
 *
 * Built as an optional extension: without a compiler the package installs without it and
 * `gpucomm.runtime.memcopy` falls back to memmove.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
    PyModuleDef_HEAD_INIT, "_stream", "Non-temporal memory copy.", -1, methods,
};

PyMODINIT_FUNC PyInit__stream(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "STREAMING", STREAMING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
