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

#include "../dispatch/_runtime.h"

static const fm_api *rt; /* the native runtime (fastmath/dispatch/_runtime.c): pool and pacing */

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
/* --- partials of large arrays, one group of a thread pool's work per call ------------------
 * backends/numpy.py splits a large logsumexp into groups of rows and runs them on its
 * pool. Each group is reduced here to SciPy's decomposition (M, m, s) (backends/_lse.py):
 * M the maximum, m the count of elements equal to it, s the sum of exp(a - M) over the
 * others. Within a group the work goes by sub-blocks of SUB_BYTES, each read from memory
 * once: its maximum, then its shifted values exponentiated and summed while in cache, and
 * the sub-blocks' partials merged in order as _lse.py's lse_merge merges them. Every step
 * that rounds is NumPy's own loop or one IEEE operation, in an order fixed by the shape
 * alone: the same bits however many threads ran. */
#define SUB_BYTES (1 << 17)

enum { FLAT, ROWS, COLS };

/* (M1, m1, s1) <- merge with (M2, m2, s2), k of each; d1, d2: scratch of k. As lse_merge. */
#define DEFINE_MERGE(T, NAME)                                                              \
    static void NAME(const Loop *lp, T *M1, T *m1, T *s1, const T *M2, const T *m2,       \
                     const T *s2, npy_intp k, T *d1, T *d2)                               \
    {                                                                                   \
        for (npy_intp j = 0; j < k; j++) {                                              \
            T M = M1[j] > M2[j] ? M1[j] : M2[j];                                        \
            d1[j] = M1[j] == M ? 0 : M1[j] - M;                                         \
            d2[j] = M2[j] == M ? 0 : M2[j] - M;                                         \
        }                                                                               \
        run1(&lp[EXP], (char *)d1, (char *)d1, k, sizeof(T));                           \
        run1(&lp[EXP], (char *)d2, (char *)d2, k, sizeof(T));                           \
        for (npy_intp j = 0; j < k; j++) {                                              \
            T M = M1[j] > M2[j] ? M1[j] : M2[j];                                        \
            int t1 = M1[j] == M, t2 = M2[j] == M;                                       \
            T m = (t1 ? m1[j] : 0) + (t2 ? m2[j] : 0);                                  \
            T s = (t1 ? s1[j] : (m1[j] + s1[j]) * d1[j])                                \
                  + (t2 ? s2[j] : (m2[j] + s2[j]) * d2[j]);                             \
            M1[j] = M, m1[j] = m, s1[j] = s;                                            \
        }                                                                               \
    }

/* e[i] = a[i] - M[i], with a[i] == M[i] counted into c[i] and its term left out. */
#define DEFINE_SHIFTV(T, NAME)                                                             \
    WIDEST static void NAME(const T *restrict a, const T *restrict M, npy_intp n,          \
                            T *restrict e, T *restrict c)                               \
    {                                                                                   \
        for (npy_intp i = 0; i < n; i++) {                                              \
            T d = a[i] - M[i];                                                          \
            c[i] += d == 0;                                                             \
            e[i] = d == 0 ? (T)-INFINITY : d;                                           \
        }                                                                               \
    }

/* M[j] = max(M[j], a[r][j]) over `rows` rows of n (a NaN sticks, as in NumPy's maximum),
 * and s[j] += e[r][j] row after row: single IEEE operations, vectorised along a row. */
#define DEFINE_ROWLOOPS(T, RAISE, ADDROWS)                                                 \
    WIDEST static void RAISE(const T *restrict a, npy_intp rows, npy_intp n, T *restrict M) \
    {                                                                                   \
        for (npy_intp r = 0; r < rows; r++) {                                           \
            const T *row = a + r * n;                                                   \
            for (npy_intp j = 0; j < n; j++) {                                          \
                M[j] = (row[j] > M[j] || row[j] != row[j]) ? row[j] : M[j];             \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    WIDEST static void ADDROWS(const T *restrict e, npy_intp rows, npy_intp n,          \
                               T *restrict s)                                           \
    {                                                                                   \
        for (npy_intp r = 0; r < rows; r++) {                                           \
            const T *row = e + r * n;                                                   \
            for (npy_intp j = 0; j < n; j++) {                                          \
                s[j] += row[j];                                                         \
            }                                                                           \
        }                                                                               \
    }

/* SUM: DEFINE_LSE's chunked shift, exp and pairwise sum of one run (lse_f_sum, lse_d_sum) */
#define DEFINE_PARTIAL(T, NAME, SUM, SHIFTV, MERGE, RAISE, ADDROWS)                        \
    DEFINE_MERGE(T, MERGE)                                                              \
    DEFINE_SHIFTV(T, SHIFTV)                                                            \
    DEFINE_ROWLOOPS(T, RAISE, ADDROWS)                                                  \
                                                                                        \
    /* (M, m, s) of `n` contiguous values, by sub-blocks. */                            \
    static int NAME##_flat(const Loop *lp, const T *a, npy_intp n, T *M, T *m, T *s,     \
                           T *e)                                                        \
    {                                                                                   \
        const npy_intp sub = SUB_BYTES / sizeof(T);                                     \
        int low = 0;                                                                    \
        for (npy_intp i = 0; i < n; i += sub) {                                         \
            npy_intp len = n - i < sub ? n - i : sub, c = 0;                            \
            T Mb = a[i], d1, d2;                                                        \
            if (len > 1) {                                                              \
                reduce(&lp[MAXIMUM], (char *)&Mb, (char *)(a + i + 1), len - 1, sizeof(T)); \
            }                                                                           \
            if (!(Mb - Mb == 0)) {                                                      \
                return -1;                                                              \
            }                                                                           \
            T sb = SUM(lp, a + i, len, Mb, e, &c, &low);                                \
            T cb = (T)c;                                                                \
            if (i == 0) {                                                               \
                *M = Mb, *m = cb, *s = sb;                                              \
            }                                                                           \
            else {                                                                      \
                MERGE(lp, M, m, s, &Mb, &cb, &sb, 1, &d1, &d2);                         \
            }                                                                           \
        }                                                                               \
        return 0;                                                                       \
    }                                                                                   \
                                                                                        \
    /* mode FLAT: all of a (rows x n, contiguous) as one run; ROWS: each row on its     \
     * own; COLS: over the rows, a result per column. */                                \
    static int NAME(const Loop *lp, const T *a, npy_intp rows, npy_intp n, int mode,     \
                    T *M, T *m, T *s, T *scratch)                                       \
    {                                                                                   \
        const npy_intp sub = SUB_BYTES / sizeof(T);                                     \
        if (mode == FLAT) {                                                             \
            return NAME##_flat(lp, a, rows * n, M, m, s, scratch);                       \
        }                                                                               \
        if (mode == ROWS) {                                                             \
            for (npy_intp r = 0; r < rows; r++) {                                       \
                if (NAME##_flat(lp, a + r * n, n, M + r, m + r, s + r, scratch) < 0) {   \
                    return -1;                                                          \
                }                                                                       \
            }                                                                           \
            return 0;                                                                   \
        }                                                                               \
        /* COLS: the running maxima are raised sub-block by sub-block; a column whose     \
         * maximum rose has its sum so far rescaled to the new one (lse_merge's step for  \
         * the lower partial), which after the first rows is rare. scratch: e, Mold, d.   \
         */                                                                             \
        npy_intp per = sub / n > 1 ? sub / n : 1;                                       \
        T *e = scratch, *Mold = e + per * n, *d = Mold + n;                             \
        npy_intp *rose = (npy_intp *)(d + n);                                           \
        memcpy(M, a, n * sizeof(T));                                                    \
        for (npy_intp j = 0; j < n; j++) {                                              \
            m[j] = 0, s[j] = 0;                                                         \
        }                                                                               \
        for (npy_intp r0 = 0; r0 < rows; r0 += per) {                                   \
            npy_intp r1 = r0 + per < rows ? r0 + per : rows, k = 0;                     \
            memcpy(Mold, M, n * sizeof(T));                                             \
            RAISE(a + r0 * n, r1 - r0, n, M);                                           \
            for (npy_intp j = 0; j < n; j++) {                                          \
                if (!(M[j] - M[j] == 0)) {                                              \
                    return -1;                                                          \
                }                                                                       \
                if (M[j] != Mold[j]) {                                                  \
                    d[k] = Mold[j] - M[j];                                              \
                    rose[k++] = j;                                                      \
                }                                                                       \
            }                                                                           \
            if (k > 0) {                                                                \
                run1(&lp[EXP], (char *)d, (char *)d, k, sizeof(T));                     \
                for (npy_intp i = 0; i < k; i++) {                                      \
                    npy_intp j = rose[i];                                               \
                    s[j] = (m[j] + s[j]) * d[i];                                        \
                    m[j] = 0;                                                           \
                }                                                                       \
            }                                                                           \
            for (npy_intp r = r0; r < r1; r++) {                                        \
                SHIFTV(a + r * n, M, n, e + (r - r0) * n, m);                           \
            }                                                                           \
            run1(&lp[EXP], (char *)e, (char *)e, (r1 - r0) * n, sizeof(T));             \
            ADDROWS(e, r1 - r0, n, s);                                                  \
        }                                                                               \
        return 0;                                                                       \
    }

DEFINE_PARTIAL(float, partial_f, lse_f_sum, shiftv_f, merge_f, raise_f, addrows_f)
DEFINE_PARTIAL(double, partial_d, lse_d_sum, shiftv_d, merge_d, raise_d, addrows_d)


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

/* The float32/float64 data of `obj` if it is an aligned, native, C-contiguous ndarray of
 * `type` with `size` elements (size < 0: any), else NULL. */
static void *operand(PyObject *obj, int type, npy_intp size)
{
    if (!PyArray_CheckExact(obj)) {
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)obj;
    if (PyArray_TYPE(arr) != type || !PyArray_IS_C_CONTIGUOUS(arr) || !PyArray_ISALIGNED(arr)
            || !PyArray_ISNOTSWAPPED(arr) || (size >= 0 && PyArray_SIZE(arr) != size)) {
        return NULL;
    }
    return PyArray_DATA(arr);
}

static PyObject *py_partial(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyArray_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "partial(a, mode, M, m, s): a 2-d array, an int "
                        "and three arrays");
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)args[0];
    int type = PyArray_TYPE(arr);
    long mode = PyLong_AsLong(args[1]);
    if (PyArray_NDIM(arr) != 2 || (type != NPY_FLOAT && type != NPY_DOUBLE)
            || mode < FLAT || mode > COLS || loops[1][EXP].fn == NULL) {
        PyErr_SetString(PyExc_ValueError, "partial: a 2-d float32/float64 array, mode 0-2, "
                        "loops bound");
        return NULL;
    }
    npy_intp rows = PyArray_DIM(arr, 0), n = PyArray_DIM(arr, 1);
    npy_intp k = mode == FLAT ? 1 : mode == ROWS ? rows : n;
    void *a = operand(args[0], type, -1), *M = operand(args[2], type, k),
         *m = operand(args[3], type, k), *s = operand(args[4], type, k);
    if (a == NULL || M == NULL || m == NULL || s == NULL || rows == 0 || n == 0) {
        PyErr_SetString(PyExc_ValueError, "partial: contiguous native operands of the "
                        "input's dtype and the mode's size");
        return NULL;
    }
    size_t item = PyArray_ITEMSIZE(arr);
    npy_intp per = SUB_BYTES / (npy_intp)item / n > 1 ? SUB_BYTES / (npy_intp)item / n : 1;
    size_t need = mode == COLS ? (size_t)(per + 2) * n * item + (size_t)n * sizeof(npy_intp)
                                : CHUNK_BYTES;
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    void *scratch = PyMem_RawMalloc(need);
    if (scratch == NULL) {
        rc = -2;
    }
    else if (type == NPY_FLOAT) {
        rc = partial_f(loops[0], a, rows, n, (int)mode, M, m, s, scratch);
    }
    else {
        rc = partial_d(loops[1], a, rows, n, (int)mode, M, m, s, scratch);
    }
    PyMem_RawFree(scratch);
    feclearexcept(FE_ALL_EXCEPT); /* the kernels ignore FP errors; leave no flags behind */
    PyEval_RestoreThread(ts);
    if (rc == -2) {
        return PyErr_NoMemory();
    }
    return PyBool_FromLong(rc == 0);
}

/* groups(): the pieces of one call, each a contiguous block of `rows` rows of `n` at
 * `offset` elements into the input, its partials written from `out` on (GROUP_COLS
 * int64 columns a piece); run by the runtime's pool, a piece at a time. */
enum { G_OFFSET, G_ROWS, G_N, G_OUT, GROUP_COLS };

typedef struct {
    int type, mode;
    char *a, *M, *m, *s;
    atomic_int failed; /* a piece's kernel declined (-1) or found no memory (-2) */
} Groups;

static void group_pieces(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    Groups *g = data;
    const int64_t *t = (const int64_t *)args[0];
    size_t item = g->type == NPY_FLOAT ? sizeof(float) : sizeof(double);
    for (intptr_t k = 0; k < *count; k++, t = (const int64_t *)((const char *)t + steps[0])) {
        npy_intp rows = (npy_intp)t[G_ROWS], n = (npy_intp)t[G_N];
        npy_intp per = SUB_BYTES / (npy_intp)item / n > 1 ? SUB_BYTES / (npy_intp)item / n : 1;
        size_t need = g->mode == COLS ? (size_t)(per + 2) * n * item + (size_t)n * sizeof(npy_intp)
                                      : CHUNK_BYTES;
        void *scratch = PyMem_RawMalloc(need);
        int rc;
        char *a = g->a + t[G_OFFSET] * (int64_t)item;
        size_t out = (size_t)t[G_OUT] * item;
        if (scratch == NULL) {
            rc = -2;
        }
        else if (g->type == NPY_FLOAT) {
            rc = partial_f(loops[0], (float *)a, rows, n, g->mode, (float *)(g->M + out),
                           (float *)(g->m + out), (float *)(g->s + out), scratch);
        }
        else {
            rc = partial_d(loops[1], (double *)a, rows, n, g->mode, (double *)(g->M + out),
                           (double *)(g->m + out), (double *)(g->s + out), scratch);
        }
        PyMem_RawFree(scratch);
        if (rc != 0) {
            atomic_store(&g->failed, rc);
        }
    }
}

static fm_pace (*group_paces)[FM_BUCKETS]; /* by the mode of the call */

/* groups(a, mode, table, M, m, s, threads) -> bool: partial() of every piece of table (an
 * int64 array of GROUP_COLS columns) over a, on the runtime's pool (at most `threads`,
 * 0: its limit), paced by its policy; False where a piece's kernel declined. */
static PyObject *py_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyArray_CheckExact(args[0]) || !PyLong_CheckExact(args[1])
            || !PyLong_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "groups(a, mode, table, M, m, s, threads)");
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)args[0];
    int type = PyArray_TYPE(arr);
    long mode = PyLong_AsLong(args[1]);
    int threads = (int)PyLong_AsLong(args[6]);
    PyArrayObject *table = PyArray_CheckExact(args[2]) ? (PyArrayObject *)args[2] : NULL;
    if ((type != NPY_FLOAT && type != NPY_DOUBLE) || mode < FLAT || mode > COLS
            || loops[1][EXP].fn == NULL || table == NULL || PyArray_NDIM(table) != 2
            || PyArray_TYPE(table) != NPY_INT64 || PyArray_DIM(table, 1) != GROUP_COLS
            || !PyArray_IS_C_CONTIGUOUS(table) || !PyArray_ISALIGNED(table)) {
        PyErr_SetString(PyExc_ValueError, "groups: a float32/float64 array, mode 0-2, an "
                        "int64 table of 4 columns, loops bound");
        return NULL;
    }
    void *a = operand(args[0], type, -1), *M = operand(args[3], type, -1),
         *m = operand(args[4], type, -1), *s = operand(args[5], type, -1);
    npy_intp k = PyArray_DIM(table, 0), size = PyArray_SIZE(arr);
    npy_intp outs = PyArray_SIZE((PyArrayObject *)args[3]);
    if (a == NULL || M == NULL || m == NULL || s == NULL
            || PyArray_SIZE((PyArrayObject *)args[4]) != outs
            || PyArray_SIZE((PyArrayObject *)args[5]) != outs) {
        PyErr_SetString(PyExc_ValueError, "groups: contiguous native operands of the input's "
                        "dtype, three outputs of one size");
        return NULL;
    }
    const int64_t *t = PyArray_DATA(table);
    for (npy_intp i = 0; i < k; i++, t += GROUP_COLS) { /* every piece within its arrays */
        int64_t width = mode == FLAT ? 1 : mode == ROWS ? t[G_ROWS] : t[G_N];
        if (t[G_ROWS] < 1 || t[G_N] < 1 || t[G_OFFSET] < 0 || t[G_OUT] < 0
                || t[G_OFFSET] + t[G_ROWS] * t[G_N] > size || t[G_OUT] + width > outs) {
            PyErr_SetString(PyExc_ValueError, "groups: a piece of the table lies outside its "
                            "arrays");
            return NULL;
        }
    }
    if (group_paces == NULL && (group_paces = calloc(3, sizeof *group_paces)) == NULL) {
        return PyErr_NoMemory();
    }
    Groups g = {type, (int)mode, a, M, m, s};
    atomic_init(&g.failed, 0);
    fm_job job;
    job.loop = group_pieces;
    job.data = &g;
    job.nargs = 1;
    job.args[0] = (char *)PyArray_DATA(table);
    job.steps[0] = GROUP_COLS * sizeof(int64_t);
    job.n = k;
    job.piece = 1;
    job.timed = 0;
    int limit = rt->threads();
    threads = threads <= 0 || threads > limit ? limit : threads;
    fm_pace *pace = group_paces[mode];
    PyThreadState *ts = PyEval_SaveThread();
    /* the runtime's pacing decides, as for every split (pieces of whole groups, so the
     * lower level: fm_split would round a piece up to 64) */
    int how = FM_NOT_RUN, pooled = 0, timed = 0;
    long long t0 = 0;
    if (k >= 2 && threads > 1 && rt->begin()) {
        how = rt->decide(pace, size, &timed);
        job.timed = timed;
        t0 = rt->wall_ns();
        pooled = how == FM_SPLIT && rt->start(&job, threads);
        if (!pooled) {
            rt->end();
            how = how == FM_SPLIT ? FM_NOT_RUN : how;
        }
    }
    if (pooled) {
        rt->finish(&job);
        rt->end();
    }
    else {
        intptr_t all = k;
        char *first = job.args[0];
        group_pieces(&first, &all, job.steps, &g);
    }
    if (how != FM_NOT_RUN && atomic_load(&g.failed) == 0) {
        long long wall = rt->wall_ns() - t0;
        if (how == FM_SPLIT) {
            rt->judge(pace, size, wall, timed ? rt->alone_ns(&job) : -1, job.woke,
                      fm_came(&job));
        }
        else {
            rt->kept(pace, size, wall);
        }
    }
    feclearexcept(FE_ALL_EXCEPT); /* the kernels ignore FP errors; leave no flags behind */
    PyEval_RestoreThread(ts);
    int failed = atomic_load(&g.failed);
    if (failed == -2) {
        return PyErr_NoMemory();
    }
    return PyBool_FromLong(failed == 0);
}

static PyObject *py_merge(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyArray_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "merge(M1, m1, s1, M2, m2, s2) takes 6 arrays");
        return NULL;
    }
    int type = PyArray_TYPE((PyArrayObject *)args[0]);
    npy_intp k = PyArray_SIZE((PyArrayObject *)args[0]);
    void *ops[6];
    for (int i = 0; i < 6; i++) {
        ops[i] = operand(args[i], type, k);
        if (ops[i] == NULL || (type != NPY_FLOAT && type != NPY_DOUBLE)) {
            PyErr_SetString(PyExc_ValueError, "merge: six contiguous float32/float64 arrays "
                            "of one dtype and size");
            return NULL;
        }
    }
    size_t item = type == NPY_FLOAT ? sizeof(float) : sizeof(double);
    void *scratch = PyMem_RawMalloc(2 * (size_t)(k ? k : 1) * item);
    if (scratch == NULL) {
        return PyErr_NoMemory();
    }
    if (type == NPY_FLOAT) {
        merge_f(loops[0], ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], k, scratch,
                (float *)scratch + k);
    }
    else {
        merge_d(loops[1], ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], k, scratch,
                (double *)scratch + k);
    }
    PyMem_RawFree(scratch);
    feclearexcept(FE_ALL_EXCEPT);
    Py_RETURN_NONE;
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
    {"partial", (PyCFunction)(void (*)(void))py_partial, METH_FASTCALL,
     "partial(a, mode, M, m, s) -> bool\n"
     "SciPy's (M, m, s) decomposition of a 2-d C-contiguous float32/float64 array a, written\n"
     "into M, m, s: mode 0 over all of a (one each), 1 per row, 2 per column. False where\n"
     "some maximum is not finite (the outputs are then undefined). Releases the GIL."},
    {"groups", (PyCFunction)(void (*)(void))py_groups, METH_FASTCALL,
     "groups(a, mode, table, M, m, s, threads) -> bool: partial() of each piece of table\n"
     "(int64 rows: offset, rows, n, out) on the native runtime's pool"},
    {"merge", (PyCFunction)(void (*)(void))py_merge, METH_FASTCALL,
     "merge(M1, m1, s1, M2, m2, s2): the first partial becomes the merge of both, as\n"
     "fastmath.backends._lse.lse_merge (finite maxima only)."},
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
    rt = fm_import();
    if (rt == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
