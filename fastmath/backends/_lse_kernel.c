/* fastmath.backends._lse_kernel: logsumexp of a small finite float array in one call.
 *
 * SciPy's logsumexp of finite input is max, exp of the shifted values (the maxima's own
 * terms taken out: a[i_max] = -inf), a pairwise sum, and log1p(s / m) + log(m) + max.
 * fastmath's Python fast path (backends/_lse.py, lse_finite) runs those steps as about ten
 * NumPy calls, each with its ufunc overhead, which at 10^3 elements costs more than the
 * arithmetic. Here the same steps run in one call, and every step that rounds is NumPy's
 * own inner loop (ufunc->functions[i], the loop NumPy's call runs): exp, log1p, log and
 * maximum, and the sum through add's loop with a reduction's strides, started
 * from add's identity 0 as NumPy's reduction starts it, which is NumPy's pairwise sum. The
 * subtraction and the division are single IEEE operations in C as in NumPy. So the result
 * is the fast path's, bit for bit; the Python side checks that once before using this.
 *
 * Whatever could differ from SciPy is left to the Python path: NaN or +inf anywhere, and
 * any divide, overflow or invalid flag raised here (SciPy warns or raises for those as
 * np.errstate says). The second item of the result says whether SciPy could have raised an
 * underflow (a flag here, or an element whose plain exp underflows, which SciPy computes
 * too): only then does the caller need to look at np.errstate.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include <fenv.h>
#include <float.h>
#include <math.h>
#include <string.h>

#define MAX_SIZE (1 << 18)     /* as FAST_MAX in _lse.py */
#define STACK_BYTES 4096       /* per-row partials on the stack up to this size */
#define NOGIL_SIZE (1 << 14)   /* from here the GIL is released while computing */
#define BAD_FLAGS (FE_DIVBYZERO | FE_OVERFLOW | FE_INVALID)

typedef struct {
    PyUFuncGenericFunction fn;
    void *data;
} Loop;

enum { EXP, LOG, LOG1P, ADD, MAXIMUM, NLOOPS };
static const char *loop_names[NLOOPS] = {"exp", "log", "log1p", "add", "maximum"};
/* [0]: float32, [1]: float64 */
static Loop loops[2][NLOOPS];

static inline void run1(const Loop *lp, char *in, char *out, npy_intp n, npy_intp step)
{
    char *args[2] = {in, out};
    npy_intp steps[2] = {step, step};
    lp->fn(args, &n, steps, lp->data);
}

/* NumPy's reduction of n values: the result starts from *acc, the loop adds the rest. */
static inline void reduce(const Loop *lp, char *acc, char *in, npy_intp n, npy_intp step)
{
    char *args[3] = {acc, in, acc};
    npy_intp steps[3] = {0, step, 0};
    lp->fn(args, &n, steps, lp->data);
}

/* NumPy's pairwise sum cuts a run longer than 128 at half its length rounded down to a
 * multiple of 8 (numpy/_core/src/umath/loops_utils.h.src) and adds the halves' sums. A
 * row longer than CHUNK is cut the same way here, so that each piece is shifted,
 * exponentiated and summed (by the loop) while it is in cache, and the pieces' sums are
 * added as NumPy's recursion adds them. */
#define CHUNK_BYTES 16384

/* Where the compiler can, the one loop of ours is built for the widest vector unit this
 * CPU has, as NumPy's own loops are (they dispatch at run time too). */
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define WIDEST __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef WIDEST
#define WIDEST
#endif

/* e[i] = a[i] - m, with SciPy's a[i_max] = -inf (so the maxima's terms are zero once
 * exponentiated); returns the number of maxima. *low is set where some a[i] < EXP_MIN:
 * below it exp(a[i]) is subnormal or zero, so SciPy's plain exp(a) underflows. */
#define DEFINE_SHIFT(T, NAME, EXP_MIN)                                                     \
    WIDEST static npy_intp NAME(const T *restrict a, npy_intp n, T m, T *restrict e,    \
                                int *low)                                               \
    {                                                                                   \
        npy_intp c = 0;                                                                 \
        int l = 0;                                                                      \
        for (npy_intp i = 0; i < n; i++) {                                              \
            T d = a[i] - m;                                                             \
            c += d == 0;                                                                \
            l |= a[i] < EXP_MIN;                                                        \
            e[i] = d == 0 ? (T)-INFINITY : d;                                           \
        }                                                                               \
        *low |= l;                                                                      \
        return c;                                                                       \
    }

DEFINE_SHIFT(float, shift_f, -87.0f)
DEFINE_SHIFT(double, shift_d, -708.0)

#define DEFINE_LSE(T, NAME, SHIFT)                                                         \
    static T NAME##_sum(const Loop *lp, const T *a, npy_intp n, T m, T *e, npy_intp *count, \
                        int *low)                                                       \
    {                                                                                   \
        if (n > (npy_intp)(CHUNK_BYTES / sizeof(T))) {                                  \
            npy_intp half = n / 2;                                                      \
            half -= half % 8;                                                           \
            T left = NAME##_sum(lp, a, half, m, e, count, low);                         \
            T right = NAME##_sum(lp, a + half, n - half, m, e, count, low);             \
            return left + right;                                                        \
        }                                                                               \
        *count += SHIFT(a, n, m, e, low);                                               \
        run1(&lp[EXP], (char *)e, (char *)e, n, sizeof(T));                             \
        T s = 0; /* add's identity, where NumPy's sum starts */                         \
        reduce(&lp[ADD], (char *)&s, (char *)e, n, sizeof(T));                          \
        return s;                                                                       \
    }                                                                                   \
                                                                                        \
    /* logsumexp over the last axis of `rows` C-contiguous rows of n (flat: one row of  \
     * all elements, finished as _lse.py's _lse_flat). out: a result per row; scratch:  \
     * CHUNK_BYTES and 2 * rows more. Returns 0, or -1 where the Python path must answer; \
     * *under: whether SciPy could have seen an underflow. */                           \
    static int NAME(const Loop *lp, const T *a, npy_intp rows, npy_intp n, int flat,     \
                    T *scratch, T *out, int *under)                                     \
    {                                                                                   \
        const npy_intp chunk = CHUNK_BYTES / sizeof(T);                                 \
        T *e = scratch, *cnt = scratch + chunk, *q = cnt + rows, *M = out;              \
        int low = 0;                                                                    \
        feclearexcept(FE_ALL_EXCEPT);                                                   \
        for (npy_intp r = 0; r < rows; r++) {                                           \
            const T *row = a + r * n;                                                   \
            M[r] = row[0];                                                              \
            if (n > 1) {                                                                \
                reduce(&lp[MAXIMUM], (char *)&M[r], (char *)(row + 1), n - 1, sizeof(T)); \
            }                                                                           \
            if (!(M[r] - M[r] == 0)) { /* NaN (maximum propagates it) or +inf */        \
                return -1;                                                              \
            }                                                                           \
        }                                                                               \
        /* short rows a chunk at a time: one exp call for all of them */               \
        npy_intp per = n > chunk ? 1 : chunk / n;                                       \
        for (npy_intp r0 = 0; r0 < rows; r0 += per) {                                   \
            npy_intp r1 = r0 + per < rows ? r0 + per : rows, c;                         \
            if (n > chunk) {                                                            \
                c = 0;                                                                  \
                q[r0] = NAME##_sum(lp, a + r0 * n, n, M[r0], e, &c, &low);              \
                cnt[r0] = (T)c;                                                         \
                continue;                                                               \
            }                                                                           \
            for (npy_intp r = r0; r < r1; r++) {                                        \
                cnt[r] = (T)SHIFT(a + r * n, n, M[r], e + (r - r0) * n, &low);          \
            }                                                                           \
            run1(&lp[EXP], (char *)e, (char *)e, (r1 - r0) * n, sizeof(T));             \
            for (npy_intp r = r0; r < r1; r++) {                                        \
                q[r] = 0; /* add's identity, where NumPy's sum starts */                \
                reduce(&lp[ADD], (char *)&q[r], (char *)(e + (r - r0) * n), n, sizeof(T)); \
            }                                                                           \
        }                                                                               \
        if (flat && cnt[0] == 1) {                                                      \
            /* _lse.py's: log1p(s) + M, SciPy's s / 1 and + log(1) changing nothing */  \
            run1(&lp[LOG1P], (char *)q, (char *)q, 1, sizeof(T));                       \
            out[0] = q[0] + M[0];                                                       \
        }                                                                               \
        else {                                                                          \
            for (npy_intp r = 0; r < rows; r++) {                                       \
                q[r] = q[r] / cnt[r];                                                   \
            }                                                                           \
            run1(&lp[LOG1P], (char *)q, (char *)q, rows, sizeof(T));                    \
            run1(&lp[LOG], (char *)cnt, (char *)cnt, rows, sizeof(T));                  \
            for (npy_intp r = 0; r < rows; r++) {                                       \
                out[r] = q[r] + cnt[r] + M[r];                                          \
            }                                                                           \
        }                                                                               \
        /* out is memory the compiler cannot keep from the flag test below */          \
        int raised = fetestexcept(BAD_FLAGS | FE_UNDERFLOW);                            \
        *under = (raised & FE_UNDERFLOW) || low;                                        \
        return raised & BAD_FLAGS ? -1 : 0;                                             \
    }

DEFINE_LSE(float, lse_f, shift_f)
DEFINE_LSE(double, lse_d, shift_d)

static PyObject *py_logsumexp(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "logsumexp(a, axis, keepdims) takes 3 arguments");
        return NULL;
    }
    PyObject *obj = args[0], *axis = args[1];
    int keepdims = args[2] == Py_True;
    if (!PyArray_CheckExact(obj)) {
        Py_RETURN_NONE;
    }
    PyArrayObject *arr = (PyArrayObject *)obj;
    int type = PyArray_TYPE(arr), nd = PyArray_NDIM(arr);
    npy_intp size = PyArray_SIZE(arr);
    if ((type != NPY_FLOAT && type != NPY_DOUBLE) || nd == 0 || size == 0
            || size > MAX_SIZE || !PyArray_IS_C_CONTIGUOUS(arr) || !PyArray_ISALIGNED(arr)
            || !PyArray_ISNOTSWAPPED(arr) || loops[1][EXP].fn == NULL) {
        Py_RETURN_NONE;
    }
    int flat = axis == Py_None;
    if (!flat) {
        if (!PyLong_CheckExact(axis)) {
            Py_RETURN_NONE;
        }
        long ax = PyLong_AsLong(axis);
        if (ax == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (ax != -1 && ax != nd - 1) {
            Py_RETURN_NONE;
        }
    }
    npy_intp n = flat ? size : PyArray_DIM(arr, nd - 1), rows = size / n;
    /* the output's shape: SciPy's, keepdims or not */
    npy_intp dims[NPY_MAXDIMS];
    int ond = 0;
    for (int i = 0; i < nd - 1 && !flat; i++) {
        dims[ond++] = PyArray_DIM(arr, i);
    }
    if (keepdims) {
        for (int i = flat ? 0 : nd - 1; i < nd; i++) {
            dims[ond++] = 1;
        }
    }
    /* a 0-d result becomes a NumPy scalar, as SciPy's out[()]: no array for it */
    double single[1];
    PyArrayObject *res = NULL;
    if (ond > 0 && (res = (PyArrayObject *)PyArray_SimpleNew(ond, dims, type)) == NULL) {
        return NULL;
    }
    void *out = res == NULL ? (void *)single : PyArray_DATA(res);
    size_t need = CHUNK_BYTES + (size_t)(2 * rows) * PyArray_ITEMSIZE(arr);
    double stack[(CHUNK_BYTES + STACK_BYTES) / sizeof(double)];
    void *scratch = need <= sizeof(stack) ? (void *)stack : PyMem_RawMalloc(need);
    if (scratch == NULL) {
        Py_XDECREF(res);
        return PyErr_NoMemory();
    }
    int under = 0, rc;
    PyThreadState *ts = size >= NOGIL_SIZE ? PyEval_SaveThread() : NULL;
    if (type == NPY_FLOAT) {
        rc = lse_f(loops[0], PyArray_DATA(arr), rows, n, flat, scratch, out, &under);
    }
    else {
        rc = lse_d(loops[1], PyArray_DATA(arr), rows, n, flat, scratch, out, &under);
    }
    if (ts != NULL) {
        PyEval_RestoreThread(ts);
    }
    if (scratch != (void *)stack) {
        PyMem_RawFree(scratch);
    }
    if (rc < 0) {
        Py_XDECREF(res);
        Py_RETURN_NONE;
    }
    PyObject *value = (PyObject *)res;
    if (res == NULL) {
        PyArray_Descr *descr = PyArray_DescrFromType(type);
        value = PyArray_Scalar(single, descr, NULL);
        Py_DECREF(descr);
        if (value == NULL) {
            return NULL;
        }
    }
    return Py_BuildValue("(NO)", value, under ? Py_True : Py_False);
}

/* The legacy loop of `obj`, a unary or binary ufunc, whose every operand has `type`. */
static int find_loop(PyObject *obj, const char *name, int type, Loop *out)
{
    if (strcmp(Py_TYPE(obj)->tp_name, "numpy.ufunc") == 0) {
        PyUFuncObject *uf = (PyUFuncObject *)obj;
        int nargs = uf->nin + uf->nout;
        for (int i = 0; i < uf->ntypes && uf->functions != NULL; i++) {
            int same = nargs <= 3 && !uf->core_enabled;
            for (int j = 0; j < nargs && same; j++) {
                same = uf->types[i * nargs + j] == type;
            }
            if (same && uf->functions[i] != NULL) {
                out->fn = uf->functions[i];
                out->data = uf->data == NULL ? NULL : uf->data[i];
                return 0;
            }
        }
    }
    PyErr_Format(PyExc_ValueError, "%s: expected numpy.%s with a loop for type %d", name,
                 name, type);
    return -1;
}

static PyObject *py_bind(PyObject *self, PyObject *args)
{
    PyObject *ufuncs[NLOOPS];
    if (!PyArg_ParseTuple(args, "OOOOO", &ufuncs[0], &ufuncs[1], &ufuncs[2], &ufuncs[3],
                          &ufuncs[4])) {
        return NULL;
    }
#if FLT_EVAL_METHOD != 0
    /* our additions and divisions would round in a wider type than NumPy's (x87) */
    PyErr_SetString(PyExc_ValueError, "float arithmetic here is not IEEE single/double");
    return NULL;
#endif
    Loop found[2][NLOOPS];
    int types[2] = {NPY_FLOAT, NPY_DOUBLE};
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < NLOOPS; k++) {
            if (find_loop(ufuncs[k], loop_names[k], types[t], &found[t][k]) < 0) {
                return NULL;
            }
        }
    }
    memcpy(loops, found, sizeof(loops));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"logsumexp", (PyCFunction)(void (*)(void))py_logsumexp, METH_FASTCALL,
     "logsumexp(a, axis, keepdims) -> (result, underflow possible) or None\n"
     "scipy.special.logsumexp(a, axis, keepdims=keepdims) of a C-contiguous float32/float64\n"
     "array of at most 2**18 finite elements, axis None or the last; None: the Python path\n"
     "must answer (another input, a flag SciPy would report, or no loops bound yet)."},
    {"bind", py_bind, METH_VARARGS,
     "bind(exp, log, log1p, add, maximum): take these NumPy ufuncs' float32 and float64\n"
     "loops (as they are now: fastmath's loop mode, if on, has put trampolines there that\n"
     "run the very same loops)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath.backends._lse_kernel",
    "logsumexp of small finite float arrays through NumPy's own loops "
    "(see fastmath/backends/_lse_kernel.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__lse_kernel(void)
{
    if (_import_array() < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}
