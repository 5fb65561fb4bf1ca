/* fastmath.integrations._loops: NumPy's own ufunc inner loops, split over a native thread pool.
 *
 * A ufunc keeps one inner-loop pointer per type signature (ufunc->functions[i]); NumPy
 * looks it up on every call, whoever calls (an operator, a library's bound name, pandas'
 * __array_ufunc__). replace() stores, in that slot, a trampoline of ours that knows the
 * original loop. A short run goes straight to the original (one extra call); a long run
 * is cut into pieces that the calling thread and the threads of fastmath's one pool
 * (fastmath/dispatch/_runtime.c, which also decides when a split wins) run, each piece by
 * the original loop, so every element is computed by NumPy's own code: the results are
 * NumPy's bit for bit.
 *
 * Why it is safe while other threads run NumPy:
 * - Installing and removing are single aligned pointer stores (atomic); a thread reads
 *   the old or the new pointer, both valid with the unchanged ufunc->data[i].
 * - A slot's original pointer is saved once and never changes or goes away, and the
 *   trampolines are static code, so a call that picked up a trampoline just before its
 *   removal still finishes correctly.
 * - One job at a time uses the pool; a caller that finds it busy runs the original loop
 *   itself instead of waiting.
 * Floating-point state: each worker takes the caller's environment (rounding, MXCSR),
 * clears its flags, and reports what its pieces raised; the caller raises their union
 * in its own thread, where NumPy's error check (np.errstate) reads it.
 * After fork() the child has no pool threads: the pool is rebuilt on first use.
 *
 * (The list runner of fastmath.foreach, which runs the same loops over a list of arrays,
 * is fastmath/dispatch/_lists.c.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include <stdatomic.h>
#include <string.h>

#include "../dispatch/_runtime.h"

#define NSLOTS 1024
#define MAXARGS FM_MAXARGS

static const fm_api *rt; /* the runtime's pool and pacing */

typedef struct {
    PyUFuncGenericFunction original; /* set once, never cleared */
    PyUFuncGenericFunction *where;   /* &ufunc->functions[i] */
    PyObject *ufunc;                 /* a strong reference: the slot outlives removal */
    int nin, nout;
    atomic_long min_split;           /* elements from which a run is split */
    atomic_long piece;               /* elements per piece */
    atomic_ulong calls, split_calls, paced_calls;
    fm_pace pace[FM_BUCKETS]; /* the back-off of its splits, by run length (fm_split) */
    fm_pace rows[FM_BUCKETS]; /* the same for whole calls split by rows (rows_call) */
    fm_pace reduce[FM_BUCKETS]; /* the same for reductions along rows (reduce_call) */
    fm_pace cols[FM_BUCKETS];   /* the same for reductions over the first axis (cols_call) */
    fm_pace full[FM_BUCKETS];   /* the same for reductions over every axis (full_call) */
} Slot;

/* All a short run reads, in one 16-byte cell apart from the Slot: the short path touches
 * one cache line and writes nothing. (With these two fields inside the 64-byte Slots, and a
 * call counter written on every run, a 3-element multiply or a 0-d log cost 3-4% more than
 * NumPy's for some slot numbers, nothing for others.) */
typedef struct {
    PyUFuncGenericFunction original; /* a copy of the Slot's */
    atomic_long min_split;           /* the Slot's, or 0 while calls are counted */
} __attribute__((aligned(16))) Hot;

static Slot slots[NSLOTS];
static Hot hot[NSLOTS];
static int nslots = 0;
static atomic_int enabled = 1;
static atomic_int counting = 0; /* count calls: every run then takes long_run */
static atomic_int timing = 0;   /* time the runs left whole: every run then takes long_run */
static atomic_llong whole_ns = 0; /* their total while timing, in ns */

/* Whether every run takes long_run now (its Hot min_split 0): counted or timed there */
static inline int long_path(void)
{
    return atomic_load(&counting) || atomic_load(&timing);
}


/* What long_run leaves to the trampoline: nothing (the run is done), NumPy's loop run as it
 * is, or run whole and timed for the pacing (see run_slot). */
enum { DONE, PLAIN, TIMED };

/* One more call of s, where calls are counted: a plain load and store, not a locked add: a
 * count for reports, where a rare lost increment under contention costs less than a bus
 * lock on every run */
static inline void count_call(Slot *s)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed)) {
        atomic_store_explicit(&s->calls,
                              atomic_load_explicit(&s->calls, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    }
}

/* What the runtime did with a run of s (rt->split's answer), in s's counts */
static inline void count_how(Slot *s, int how)
{
    if (how == FM_SPLIT) {
        atomic_fetch_add_explicit(&s->split_calls, 1, memory_order_relaxed);
    }
    else if (how == FM_WHOLE_PACED || how == FM_WHOLE_SHARED) {
        atomic_fetch_add_explicit(&s->paced_calls, 1, memory_order_relaxed);
    }
}

/* Split one run over the runtime's pool, or say that the pacing keeps it whole now (TIMED:
 * the trampoline runs it); PLAIN when the pool cannot take it; DONE when it ran. */
static int split(Slot *s, char **args, npy_intp n, const npy_intp *steps, void *data)
{
    fm_job job;
    job.timed = 0;
    job.loop = (fm_loop)s->original;
    job.data = data;
    job.nargs = s->nin + s->nout;
    job.n = n;
    job.piece = atomic_load_explicit(&s->piece, memory_order_relaxed);
    for (int k = 0; k < job.nargs; k++) {
        job.args[k] = args[k];
        job.steps[k] = steps[k];
    }
    int how = rt->split_or_say(s->pace, &job, 0);
    count_how(s, how);
    /* (FM_WHOLE_SHARED: the runtime ran it whole, beside other threads' calls) */
    return how == FM_SPLIT || how == FM_WHOLE_SHARED ? DONE : how == FM_NOT_RUN ? PLAIN : TIMED;
}

/* Pieces may run in any order only if no output overlaps an input other than exactly. */
static int independent(Slot *s, char **args, npy_intp n, const npy_intp *steps)
{
    int nargs = s->nin + s->nout;
    for (int o = s->nin; o < nargs; o++) {
        if (steps[o] == 0) { /* a reduction: every element lands on one */
            return 0;
        }
    }
    for (int a = 0; a < nargs; a++) {
        char *alo = args[a] + (steps[a] < 0 ? (n - 1) * steps[a] : 0);
        char *ahi = args[a] + (steps[a] < 0 ? 0 : (n - 1) * steps[a]) + 16;
        for (int o = s->nin; o < nargs; o++) {
            if (o == a || (args[a] == args[o] && steps[a] == steps[o])) {
                continue;
            }
            char *olo = args[o] + (steps[o] < 0 ? (n - 1) * steps[o] : 0);
            char *ohi = args[o] + (steps[o] < 0 ? 0 : (n - 1) * steps[o]) + 16;
            if (alo < ohi && olo < ahi) {
                return 0;
            }
        }
    }
    return 1;
}

/* kept out of line, so that the short path below stays a few instructions and a jump */
static __attribute__((noinline)) int long_run(Slot *s, char **args, npy_intp const *dims,
                                              npy_intp const *steps, void *data)
{
    npy_intp n = dims[0];
    count_call(s);
    if (!(n >= atomic_load_explicit(&s->min_split, memory_order_relaxed)
            && atomic_load_explicit(&enabled, memory_order_relaxed)
            && independent(s, args, n, steps))) {
        return PLAIN;
    }
    return split(s, args, n, steps, data);
}

/* A run the pacing keeps whole is NumPy's loop called from the trampoline's own frame, as
 * near as can be to where NumPy calls it: the speed of NumPy's loops depends on where the
 * stack lies (on the 2-vCPU VMs here, log of 10^4 float64 elements took 7.7 us in NumPy's
 * own call and 8.8 us called four frames deeper, in the same process, every worker
 * parked; and 2-3x as long at some stack depths in some processes), and a split is judged
 * against the whole runs: one that beat the deeper whole runs lost to NumPy's own call. */
static inline void run_slot(int i, char **args, npy_intp const *dims, npy_intp const *steps,
                            void *data)
{
    Hot *h = &hot[i];
    if (dims[0] >= atomic_load_explicit(&h->min_split, memory_order_relaxed)) {
        int how = long_run(&slots[i], args, dims, steps, data);
        if (how == DONE) {
            return;
        }
        if (how == TIMED) {
            long long t0 = rt->wall_ns();
            h->original(args, dims, steps, data);
            rt->kept(slots[i].pace, dims[0], rt->wall_ns() - t0);
            return;
        }
        /* (min_split is 0 while timing) a run that could split: one whose pieces are
         * independent (not a reduction's, whose output is one element) */
        if (atomic_load_explicit(&timing, memory_order_relaxed)
                && independent(&slots[i], args, dims[0], steps)) {
            long long t0 = rt->wall_ns();
            h->original(args, dims, steps, data);
            atomic_fetch_add_explicit(&whole_ns, rt->wall_ns() - t0, memory_order_relaxed);
            return;
        }
    }
    h->original(args, dims, steps, data);
}

/* NSLOTS trampolines, tramp<base-4 digits>, each bound to its slot number */
#define T1(n, i) static void tramp##n(char **a, npy_intp const *d, npy_intp const *s, \
                                      void *u) { run_slot(i, a, d, s, u); }
#define T4(n, i) T1(n##0, 4*(i)) T1(n##1, 4*(i)+1) T1(n##2, 4*(i)+2) T1(n##3, 4*(i)+3)
#define T16(n, i) T4(n##0, 4*(i)) T4(n##1, 4*(i)+1) T4(n##2, 4*(i)+2) T4(n##3, 4*(i)+3)
#define T64(n, i) T16(n##0, 4*(i)) T16(n##1, 4*(i)+1) T16(n##2, 4*(i)+2) T16(n##3, 4*(i)+3)
#define T256(n, i) T64(n##0, 4*(i)) T64(n##1, 4*(i)+1) T64(n##2, 4*(i)+2) T64(n##3, 4*(i)+3)
T256(0, 0) T256(1, 1) T256(2, 2) T256(3, 3)

#define P1(n) tramp##n,
#define P4(n) P1(n##0) P1(n##1) P1(n##2) P1(n##3)
#define P16(n) P4(n##0) P4(n##1) P4(n##2) P4(n##3)
#define P64(n) P16(n##0) P16(n##1) P16(n##2) P16(n##3)
#define P256(n) P64(n##0) P64(n##1) P64(n##2) P64(n##3)
static PyUFuncGenericFunction trampolines[NSLOTS] = {P256(0) P256(1) P256(2) P256(3)};

/* ---- calls NumPy cuts into rows ---------------------------------------------------- */

/* A call that broadcasts (``a += bias``, ``s - s.max(-1, keepdims=True)``) or reads a
 * strided view (``np.exp(a[:, :32])``) reaches the inner loop once per row: NumPy's iterator
 * cannot join the rows of an operand whose rows do not follow each other in memory. A
 * trampoline then sees runs of a row's length, too short to split, however large the
 * call: a network's bias add over 200000x64 float64 took 9.6 ms in NumPy, 9.6 under the
 * loop mode, where a same-shaped add of two full arrays took 12.7 and 6.7. So the loop
 * mode also stands in for the ufunc's call itself (its vectorcall, which operators and
 * every other caller reach) and, for the calls it can take whole, runs the rows itself:
 * each element by NumPy's own loop, given a row or part of one at a time, on the pool's
 * threads. So are calls whose integer or bool inputs NumPy casts to the loop's float type
 * in buffers of 8192 elements (``np.log(counts)``, ``x * n``), each buffer a run of its
 * own: here each input is cast a block at a time in the thread that computes it.
 * Everything else (small calls, float casts, where=, dtype=, subclasses, scalars,
 * overlapping memory, calls NumPy runs as one run anyway) goes to NumPy's own call
 * unchanged.
 *
 * A call it takes has exact ndarray operands (native and aligned) of the float type
 * (float32 or float64) of the loop NumPy picks for them, or of integers or bool that it
 * casts, the loop the loop mode reaches for that type, an output of the
 * loop's type that is C-contiguous (given as out=, positionally or as a 1-tuple, or made
 * here as NumPy makes it), of the broadcast shape, and of at least the loop's size to
 * split. Its dimensions fall in two groups, rows and columns, each operand's memory
 * following the rows (any step) and the columns (contiguous or broadcast) of its group.
 * FP flags are gathered as the pool gathers them and acted on in the caller's thread by
 * fastmath.dispatch._fpe.report, as NumPy's own check would. */
#define NCALLS 128
#define MIN_COLS 16
#define FP_ERRORS (FE_DIVBYZERO | FE_OVERFLOW | FE_UNDERFLOW | FE_INVALID)

typedef struct {
    PyObject *ufunc;           /* a strong reference, kept for good */
    vectorcallfunc original;   /* NumPy's, set once */
    vectorcallfunc *where;     /* in the ufunc object */
    PyObject *name;            /* the ufunc's name, for the FP error report */
    int nin;
    int slot[3];               /* the loop slots of float32, float64 and int64 (-1: none) */
    npy_intp least;            /* the smallest of their sizes to split */
    int out_type[3];           /* the type number those loops write */
    /* NumPy's choice of loop for inputs of other types (ufunc.resolve_dtypes): which of
     * the three (0, 1, 2) or none (-1), for the type numbers of up to two inputs */
    struct { int t0, t1, which; } chose[8];
    int nchose;
    /* (the reductions below are of the float loops only: which 0 and 1) */
    /* NumPy's reduction of a row by the loop of float32 (0) and float64 (1): -1, not
     * taken; 0, the accumulator starts at `identity` and the loop runs over the row; 1, it
     * starts at the row's first element and the loop runs over the rest (set_reduce) */
    int reduce_way[2];
    /* over the first axis (cols_call): -1, not taken; else the ways a reduction by that
     * loop may be split, bits 1 << COLS_BLOCKS and 1 << COLS_PARTS (set_reduce_cols) */
    int cols_how[2];
    /* over every axis (full_call): -1, not taken; else FULL_TREE or FULL_PARTS, the way a
     * reduction by that loop is split (set_reduce_full) */
    int full_how[2];
    double identity;
} Call;

static Call calls[NCALLS];
static int ncalls = 0;
static PyObject *report = NULL; /* fastmath.dispatch._fpe.report(name, flags) */

/* One call's rows: element e of the call is element e % cols of row e / cols */
typedef struct {
    PyUFuncGenericFunction loop;
    void *data;
    int nargs;
    npy_intp cols;
    char *first;               /* the output's first element: a piece's args[0] counts from it */
    npy_intp unit;             /* the output's item size */
    char *base[MAXARGS];
    npy_intp row[MAXARGS], col[MAXARGS];
    void (*conv[MAXARGS])(const char *, char *, npy_intp); /* an input's cast, or NULL */
    npy_intp lsize;            /* the loop's input item size (a cast's output) */
} Rows;

/* Integer and bool inputs NumPy casts to the loop's type (float32's or float64's; bool
 * and narrower integers to int64's, as in scipy.stats' ``(1 - cond0) + np.isnan(x)``), in
 * its buffers of 8192 elements (so that each run was too short to split): here a block at
 * a time, in the thread that computes it, as C converts (NumPy's casts of these are C's
 * conversions, which raise no flag NumPy reads). Float inputs of the other float type are left to
 * NumPy: a signalling NaN's cast raises invalid, which NumPy reports as the cast's. */
#define CAST_BLOCK 512
#define CONV(NAME, S, D, EXPR)                                                            \
    static void NAME(const char *src, char *dst, npy_intp n)                              \
    {                                                                                     \
        const S *x = (const S *)src;                                                      \
        D *y = (D *)dst;                                                                  \
        for (npy_intp i = 0; i < n; i++) {                                                \
            y[i] = (D)(EXPR);                                                             \
        }                                                                                 \
    }
#define CONVS(D)                                                                          \
    CONV(b_##D, npy_bool, D, x[i] != 0) CONV(i8_##D, npy_int8, D, x[i])                   \
    CONV(i16_##D, npy_int16, D, x[i]) CONV(i32_##D, npy_int32, D, x[i])                   \
    CONV(i64_##D, npy_int64, D, x[i]) CONV(u8_##D, npy_uint8, D, x[i])                    \
    CONV(u16_##D, npy_uint16, D, x[i]) CONV(u32_##D, npy_uint32, D, x[i])                 \
    CONV(u64_##D, npy_uint64, D, x[i])
CONVS(float)
CONVS(double)
CONVS(npy_int64)

/* The loops a call may run by rows: float32's (which 0), float64's (1), int64's (2) */
static const int loop_type[3] = {NPY_FLOAT, NPY_DOUBLE, NPY_INT64};
static const npy_intp loop_size[3] = {4, 8, 8};

/* The cast of a's items to the type of loop `which`, or NULL where there is none. */
static void (*converter(PyArrayObject *a, int which))(const char *, char *, npy_intp)
{
    static void (*const f[3][9])(const char *, char *, npy_intp) = {
        {b_float, i8_float, i16_float, i32_float, i64_float, u8_float, u16_float, u32_float,
         u64_float},
        {b_double, i8_double, i16_double, i32_double, i64_double, u8_double, u16_double,
         u32_double, u64_double},
        {b_npy_int64, i8_npy_int64, i16_npy_int64, i32_npy_int64, i64_npy_int64,
         u8_npy_int64, u16_npy_int64, u32_npy_int64, u64_npy_int64}};
    char kind = PyArray_DESCR(a)->kind;
    npy_intp size = PyArray_ITEMSIZE(a);
    int at = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : size == 8 ? 3 : -1;
    if (at < 0 || (kind == 'b' && size != 1)) {
        return NULL;
    }
    int k = kind == 'b' ? 0 : kind == 'i' ? 1 + at : kind == 'u' ? 5 + at : -1;
    return k < 0 ? NULL : f[which][k];
}

/* m elements of a row from a (each operand's first), with the inputs that need it cast a
 * block at a time into buffers the loop reads. */
static void cast_segment(const Rows *r, char **a, npy_intp m)
{
    _Alignas(64) char buf[MAXARGS][CAST_BLOCK * 8];
    for (npy_intp b = 0; b < m; b += CAST_BLOCK) {
        npy_intp n = m - b < CAST_BLOCK ? m - b : CAST_BLOCK;
        char *p[MAXARGS];
        npy_intp steps[MAXARGS];
        for (int k = 0; k < r->nargs; k++) {
            if (r->conv[k] == NULL) {
                p[k] = a[k] + b * r->col[k];
                steps[k] = r->col[k];
            }
            else if (r->col[k] == 0) { /* broadcast along the row: one value */
                r->conv[k](a[k], buf[k], 1);
                p[k] = buf[k];
                steps[k] = 0;
            }
            else {
                r->conv[k](a[k] + b * r->col[k], buf[k], n);
                p[k] = buf[k];
                steps[k] = r->lsize;
            }
        }
        r->loop(p, &n, steps, r->data);
    }
}

static void rows_loop(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    const Rows *r = data;
    npy_intp e = (args[0] - r->first) / r->unit, left = *count;
    npy_intp i = e / r->cols, j = e % r->cols;
    while (left > 0) {
        npy_intp m = r->cols - j < left ? r->cols - j : left;
        char *a[MAXARGS];
        int casts = 0;
        for (int k = 0; k < r->nargs; k++) {
            a[k] = r->base[k] + i * r->row[k] + j * r->col[k];
            casts |= r->conv[k] != NULL;
        }
        if (casts) {
            cast_segment(r, a, m);
        }
        else {
            r->loop(a, &m, r->col, r->data);
        }
        left -= m;
        i++;
        j = 0;
    }
}

/* An operand's step over dims [lo, hi) of shape s when its strides st follow them as one
 * run (each dim's stride the next one's times its length; dims of length 1 ignored); 0
 * when the group holds only dims of length 1; 0 with *ok cleared when they do not. */
static npy_intp group_step(const npy_intp *st, const npy_intp *s, int lo, int hi, int *ok)
{
    npy_intp step = 0, expect = 0;
    int seen = 0;
    for (int j = hi - 1; j >= lo; j--) {
        if (s[j] == 1) {
            continue;
        }
        if (!seen) {
            step = st[j];
            seen = 1;
        }
        else if (st[j] != expect) {
            *ok = 0;
            return 0;
        }
        expect = st[j] * s[j];
    }
    return step;
}

/* The lowest and past-highest byte an operand of shape s and strides st reaches. */
static void extent(char *data, const npy_intp *st, const npy_intp *s, int d, npy_intp size,
                   char **lo, char **hi)
{
    npy_intp below = 0, above = 0;
    for (int j = 0; j < d; j++) {
        npy_intp reach = (s[j] - 1) * st[j];
        if (reach < 0) {
            below += reach;
        }
        else {
            above += reach;
        }
    }
    *lo = data + below;
    *hi = data + above + size;
}

/* The size of the shape n operands broadcast to, where they do (else at least their own:
 * the full test below finds that NumPy's error is due). Read from their dimensions alone:
 * a bound from their sizes let 2000-element calls of two arrays through to the full test,
 * which cost them 8% more than NumPy's call. */
static npy_intp broadcast_size(PyArrayObject *const *ops, int n)
{
    int d = 0;
    for (int k = 0; k < n; k++) {
        d = PyArray_NDIM(ops[k]) > d ? PyArray_NDIM(ops[k]) : d;
    }
    npy_intp total = 1;
    for (int j = 1; j <= d; j++) {
        npy_intp len = 1;
        for (int k = 0; k < n; k++) {
            int nd = PyArray_NDIM(ops[k]);
            if (j <= nd && PyArray_DIM(ops[k], nd - j) > len) {
                len = PyArray_DIM(ops[k], nd - j);
            }
        }
        if (__builtin_mul_overflow(total, len, &total)) {
            return NPY_MAX_INTP;
        }
    }
    return total;
}

static int is_out(PyObject *name)
{
    return PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "out") == 0;
}

/* NumPy's FP flag bits (NPY_FPE_*, as np.errstate's callbacks get them) of fenv's. */
static int numpy_flags(int raised)
{
    return (raised & FE_DIVBYZERO ? 1 : 0) | (raised & FE_OVERFLOW ? 2 : 0)
           | (raised & FE_UNDERFLOW ? 4 : 0) | (raised & FE_INVALID ? 8 : 0);
}

/* Run loop(data) over the n items of out (each `unit` bytes; pieces of `piece` items),
 * split over the pool where `split` and the back-off of `paces` say so, else whole in this
 * thread, with the GIL released; then after(data) where given, in the same thread; then
 * act on the FP flags they raised as NumPy's own check would, under `name` (the ufunc's,
 * or "reduce"). `exact` > 0: pieces of exactly `piece` items, paced as a call of `exact`
 * elements (the runtime's split_exact). Returns out, or NULL (out released) where that
 * raised. */
static PyObject *run_job(Slot *s, fm_pace *paces, fm_loop loop, void *data, npy_intp unit,
                         npy_intp n, npy_intp piece, int split, PyObject *name,
                         PyArrayObject *out, npy_intp exact, void (*after)(void *))
{
    fm_job job;
    job.timed = 0;
    job.loop = loop;
    job.data = data;
    job.nargs = 1;
    job.args[0] = PyArray_BYTES(out);
    job.steps[0] = unit;
    job.n = n;
    job.piece = piece;
    int how = FM_NOT_RUN, raised;
    Py_BEGIN_ALLOW_THREADS
    feclearexcept(FP_ERRORS);
    if (split) {
        how = exact > 0 ? rt->split_exact(paces, &job, 0, exact)
                        : rt->split(paces, &job, 0);
    }
    if (how == FM_NOT_RUN) {
        intptr_t all = n;
        loop(job.args, &all, job.steps, data);
    }
    if (after != NULL) {
        after(data);
    }
    raised = fetestexcept(FP_ERRORS);
    feclearexcept(FP_ERRORS);
    Py_END_ALLOW_THREADS
    count_how(s, how);
    if (raised && report != NULL) {
        PyObject *flags = PyLong_FromLong(numpy_flags(raised));
        PyObject *done = flags == NULL ? NULL
                         : PyObject_CallFunctionObjArgs(report, name, flags, NULL);
        Py_XDECREF(flags);
        if (done == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(done);
    }
    return (PyObject *)out;
}

/* Which of c's loops NumPy runs for the inputs ops: 0 (float32's), 1 (float64's), or -1
 * (another loop, none, or an error). Inputs of one float type run its loop; for others
 * NumPy's own resolution (ufunc.resolve_dtypes, which the call makes too) is asked once
 * and kept. Under the GIL. */
static int loop_for(Call *c, PyArrayObject *const *ops)
{
    int t0 = PyArray_TYPE(ops[0]), t1 = c->nin >= 2 ? PyArray_TYPE(ops[1]) : -1;
    if (c->nin == 1 || t0 == t1) {
        if (t0 == NPY_FLOAT || t0 == NPY_DOUBLE) {
            int w = t0 == NPY_DOUBLE;
            return c->slot[w] >= 0 ? w : -1;
        }
        if (t0 == NPY_INT64 && c->slot[2] >= 0) { /* else NumPy may cast them (np.log) */
            return 2;
        }
    }
    if (c->nin > 2) {
        return -1;
    }
    for (int k = 0; k < c->nchose; k++) {
        if (c->chose[k].t0 == t0 && c->chose[k].t1 == t1) {
            return c->chose[k].which;
        }
    }
    int which = -1, nargs = c->nin + 1;
    PyObject *types = PyTuple_New(nargs);
    if (types == NULL) {
        PyErr_Clear();
        return -1;
    }
    for (int k = 0; k < c->nin; k++) {
        PyTuple_SET_ITEM(types, k, Py_NewRef((PyObject *)PyArray_DESCR(ops[k])));
    }
    PyTuple_SET_ITEM(types, c->nin, Py_NewRef(Py_None));
    PyObject *got = PyObject_CallMethod(c->ufunc, "resolve_dtypes", "(O)", types);
    Py_DECREF(types);
    if (got == NULL) { /* no loop: NumPy's call raises its own error */
        PyErr_Clear();
    }
    else {
        if (PyTuple_Check(got) && PyTuple_GET_SIZE(got) == nargs) {
            int ok = 1, lt = -1;
            for (int k = 0; k < nargs && ok; k++) {
                PyObject *dt = PyTuple_GET_ITEM(got, k);
                ok = PyArray_DescrCheck(dt);
                int tn = ok ? ((PyArray_Descr *)dt)->type_num : -1;
                if (k == 0) {
                    lt = tn;
                    which = lt == NPY_FLOAT ? 0 : lt == NPY_DOUBLE ? 1
                            : lt == NPY_INT64 ? 2 : -1;
                    ok = which >= 0 && c->slot[which] >= 0;
                }
                else {
                    ok = ok && tn == (k < c->nin ? lt : c->out_type[which]);
                }
            }
            which = ok ? which : -1;
        }
        Py_DECREF(got);
    }
    if (c->nchose < (int)(sizeof c->chose / sizeof c->chose[0])) {
        c->chose[c->nchose].t0 = t0;
        c->chose[c->nchose].t1 = t1;
        c->chose[c->nchose].which = which;
        c->nchose++;
    }
    return which;
}

/* The call by rows where admit() found it may be one: ops (the inputs, then out= where
 * given: n of them) exact ndarrays broadcast to at least the size to split of the loop
 * `which`. Kept out of line: rows_call's frame holds a job aligned to a cache line. */
static __attribute__((noinline)) PyObject *
rows_call(Call *c, PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames,
          PyArrayObject **ops, int n, int which)
{
    int nin = c->nin;
    PyObject *outobj = n > nin ? (PyObject *)ops[nin] : NULL;
    Slot *s = &slots[c->slot[which]];
    int nops = nin + 1, d = 0, casts = 0;
    npy_intp lsize = loop_size[which], isz[MAXARGS];
    void (*conv[MAXARGS])(const char *, char *, npy_intp) = {NULL};
    for (int k = 0; k < n; k++) {
        if (!PyArray_ISNOTSWAPPED(ops[k]) || !PyArray_ISALIGNED(ops[k])) {
            goto numpy;
        }
        if (k < nin && PyArray_TYPE(ops[k]) != loop_type[which]) {
            conv[k] = converter(ops[k], which);
            if (conv[k] == NULL) {
                goto numpy;
            }
            casts = 1;
        }
        else if (k == nin && PyArray_TYPE(ops[k]) != c->out_type[which]) {
            goto numpy;
        }
        isz[k] = PyArray_ITEMSIZE(ops[k]);
        d = PyArray_NDIM(ops[k]) > d ? PyArray_NDIM(ops[k]) : d;
    }
    /* one dimension: NumPy's one run, which the trampoline splits, unless it casts: then
     * a row of its own (NumPy's runs are its buffers') */
    int dn = d;
    if (d < 2) {
        if (!casts || d < 1) {
            goto numpy;
        }
        d = 2;
    }
    /* the broadcast shape, and each operand's strides over it (0 where it broadcasts) */
    npy_intp shape[NPY_MAXDIMS], st[MAXARGS][NPY_MAXDIMS];
    for (int j = 0; j < d; j++) {
        shape[j] = 1;
    }
    for (int k = 0; k < n; k++) {
        int nd = PyArray_NDIM(ops[k]);
        for (int j = 0; j < d; j++) {
            int jj = j - (d - nd);
            npy_intp len = jj < 0 ? 1 : PyArray_DIM(ops[k], jj);
            st[k][j] = len == 1 ? 0 : PyArray_STRIDE(ops[k], jj);
            if (len != 1) {
                if (shape[j] == 1) {
                    shape[j] = len;
                }
                else if (shape[j] != len) {
                    goto numpy; /* NumPy's error */
                }
            }
        }
    }
    npy_intp total = 1; /* at least the size to split: admit() read it (broadcast_size) */
    for (int j = 0; j < d; j++) {
        total *= shape[j];
    }
    npy_intp osize = c->out_type[which] == NPY_BOOL ? 1 : lsize;
    if (outobj != NULL) {
        if (PyArray_NDIM(ops[nin]) != dn || !PyArray_IS_C_CONTIGUOUS(ops[nin])
                || !PyArray_ISWRITEABLE(ops[nin])) {
            goto numpy;
        }
        for (int j = 0; j < dn; j++) {
            if (PyArray_DIM(ops[nin], j) != shape[j + d - dn]) {
                goto numpy;
            }
        }
    }
    else {
        /* NumPy's output follows its inputs' order (K): C where each input's steps fall
         * from its outer dims to its inner ones, as they must here (below) */
        for (int k = 0; k < nin; k++) {
            npy_intp last = NPY_MAX_INTP;
            for (int j = 0; j < d; j++) {
                if (st[k][j] == 0) {
                    continue;
                }
                if (st[k][j] < 0 || st[k][j] >= last) {
                    goto numpy;
                }
                last = st[k][j];
            }
        }
    }
    npy_intp cst = osize; /* the output's C-contiguous strides */
    for (int j = d - 1; j >= 0; j--) {
        st[nin][j] = shape[j] == 1 ? 0 : cst;
        cst *= shape[j];
    }
    /* the two groups: the first split point that every operand follows */
    int cut = -1;
    npy_intp row[MAXARGS], col[MAXARGS];
    for (int k0 = 1; k0 < d && cut < 0; k0++) {
        int ok = 1;
        for (int k = 0; k < nops && ok; k++) {
            npy_intp size = k < nin ? isz[k] : osize;
            col[k] = group_step(st[k], shape, k0, d, &ok);
            row[k] = group_step(st[k], shape, 0, k0, &ok);
            if (col[k] != 0 && col[k] != size) {
                ok = 0;
            }
        }
        if (ok) {
            cut = k0;
        }
    }
    if (cut < 0) {
        goto numpy;
    }
    npy_intp cols = 1;
    for (int j = cut; j < d; j++) {
        cols *= shape[j];
    }
    /* all of one run (every operand whole and contiguous, or one element): NumPy's,
     * unless it casts */
    int one_run = !casts;
    for (int k = 0; k < nops; k++) {
        npy_intp size = k < nin ? isz[k] : osize;
        if (!((col[k] == size && row[k] == cols * size) || (col[k] == 0 && row[k] == 0))) {
            one_run = 0;
        }
    }
    if (one_run || (total / cols < 2 && !casts)) { /* NumPy's one run */
        goto numpy;
    }
    /* Rows narrower than MIN_COLS are NumPy's (in its buffers of 8192): a program's narrow
     * broadcasts come many and various between other work, and with one core busy their
     * splits lost more than the pacing could learn of each (GaussianMixture.fit over
     * 200000 x 4 and x 8: 0.74-0.87x of plain against 0.98-1.04x left to NumPy, 2-vCPU
     * Intel Xeon); a row of 4 also ran slower whole here than in NumPy's buffers (a column
     * subtracted: 2.9 against 2.3 ms). */
    if (cols < MIN_COLS) {
        goto numpy;
    }
    /* an input that overlaps the output other than exactly: NumPy copies it first */
    if (outobj != NULL) {
        char *olo = PyArray_BYTES(ops[nin]), *ohi = olo + total * osize;
        for (int k = 0; k < nin; k++) {
            char *lo, *hi;
            if (PyArray_BYTES(ops[k]) == olo && row[k] == row[nin] && col[k] == col[nin]) {
                continue;
            }
            extent(PyArray_BYTES(ops[k]), st[k], shape, d, isz[k], &lo, &hi);
            if (lo < ohi && olo < hi) {
                goto numpy;
            }
        }
    }
    PyArrayObject *out = (PyArrayObject *)outobj;
    if (out == NULL) {
        out = (PyArrayObject *)PyArray_SimpleNew(dn, shape + (d - dn), c->out_type[which]);
        if (out == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(out);
    }
    ops[nin] = out;
    PyUFuncObject *uf = (PyUFuncObject *)c->ufunc;
    Rows r;
    r.loop = s->original;
    r.data = uf->data[s->where - uf->functions];
    r.nargs = nops;
    r.cols = cols;
    r.first = PyArray_BYTES(out);
    r.unit = osize;
    r.lsize = lsize;
    for (int k = 0; k < nops; k++) {
        r.base[k] = PyArray_BYTES(ops[k]);
        r.row[k] = row[k];
        r.col[k] = col[k];
        r.conv[k] = k < nin ? conv[k] : NULL;
    }
    npy_intp piece = atomic_load_explicit(&s->piece, memory_order_relaxed);
    /* the runtime caps a piece's bytes by its steps, here the output's (bool's 1 byte):
     * the cap by the widest operand, 8 bytes */
    if (piece > FM_PIECE_BYTES / 8) {
        piece = FM_PIECE_BYTES / 8;
    }
    count_call(s);
    return run_job(s, s->rows, rows_loop, &r, osize, total, piece, 1, c->name, out, 0,
                   NULL);
numpy:
    return c->original(callable, args, nargsf, kwnames);
}

/* Whether an input may make a call NumPy runs by rows or by buffers: two dimensions or
 * more, or items NumPy casts (not float32 or float64) */
static inline __attribute__((always_inline)) int rows_or_casts(PyObject *o)
{
    return PyArray_CheckExact(o)
           && (PyArray_NDIM((PyArrayObject *)o) >= 2
               || (PyArray_TYPE((PyArrayObject *)o) != NPY_DOUBLE
                   && PyArray_TYPE((PyArrayObject *)o) != NPY_FLOAT));
}

/* An exact ndarray's size, else 1: with the other input's, a bound on the size of the call
 * (an out= that the inputs broadcast to is not counted: such a call is left to NumPy) */
static inline __attribute__((always_inline)) npy_uintp size_or_one(PyObject *o)
{
    npy_uintp n = 1;
    if (PyArray_CheckExact(o)) {
        for (int j = 0; j < PyArray_NDIM((PyArrayObject *)o); j++) {
            n *= (npy_uintp)PyArray_DIM((PyArrayObject *)o, j);
        }
    }
    return n;
}

/* A NumPy scalar of a type whose loops run here or cast to them (bool, the integers,
 * float32, float64), of that type exactly: a subclass's may override the call
 * (__array_ufunc__), which NumPy then hands it. */
static int plain_scalar(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    return t == &PyDoubleArrType_Type || t == &PyLongArrType_Type || t == &PyBoolArrType_Type
           || t == &PyFloatArrType_Type || t == &PyLongLongArrType_Type
           || t == &PyIntArrType_Type || t == &PyShortArrType_Type || t == &PyByteArrType_Type
           || t == &PyULongArrType_Type || t == &PyULongLongArrType_Type
           || t == &PyUIntArrType_Type || t == &PyUShortArrType_Type
           || t == &PyUByteArrType_Type;
}

/* Whether a call that strided_call let through is one for rows_call to look at: exact
 * ndarrays for whose types NumPy runs one of this entry's loops (loop_for), broadcast to
 * at least that loop's size to split, out= at most (positional, or the one keyword). An
 * input may be a NumPy scalar (``np.int64(1) - mask``; plain_scalar): NumPy picks the loop
 * from its dtype as from a 0-d array's (NEP 50: both are strongly typed), and so does
 * loop_for from the 0-d array made of it here; Python's numbers (weakly typed) are
 * NumPy's. Read once and handed on. Its own small frame, from which NumPy's call is a
 * jump: rows_call's frame (a job aligned to a cache line) made every call of two 3x3
 * arrays 3-5% slower than NumPy's. */
static __attribute__((noinline)) PyObject *
admit(Call *c, PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int nin = c->nin, n = nin, nmade = 0;
    PyArrayObject *ops[MAXARGS];
    PyObject *made[MAXARGS]; /* the 0-d arrays made of scalar inputs */
    if (!atomic_load_explicit(&enabled, memory_order_relaxed)) {
        goto numpy;
    }
    if (kwnames == NULL ? nargs == nin + 1
                        : nargs == nin && PyTuple_GET_SIZE(kwnames) == 1
                          && is_out(PyTuple_GET_ITEM(kwnames, 0))) {
        PyObject *o = args[nin];
        if (kwnames != NULL && PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 1) {
            o = PyTuple_GET_ITEM(o, 0);
        }
        if (o != Py_None) {
            if (!PyArray_CheckExact(o)) {
                goto numpy;
            }
            ops[n++] = (PyArrayObject *)o;
        }
    }
    else if (nargs != nin || kwnames != NULL) {
        goto numpy;
    }
    for (int k = 0; k < nin; k++) {
        PyObject *o = args[k];
        if (!PyArray_CheckExact(o)) {
            if (!plain_scalar(o)) {
                goto numpy;
            }
            o = PyArray_FromScalar(o, NULL);
            if (o == NULL) {
                PyErr_Clear();
                goto numpy;
            }
            made[nmade++] = o;
        }
        ops[k] = (PyArrayObject *)o;
    }
    int which = loop_for(c, ops);
    if (which >= 0
            && broadcast_size(ops, n) >= atomic_load_explicit(&slots[c->slot[which]].min_split,
                                                              memory_order_relaxed)) {
        PyObject *r = rows_call(c, callable, args, nargsf, kwnames, ops, n, which);
        while (nmade > 0) {
            Py_DECREF(made[--nmade]);
        }
        return r;
    }
numpy:
    while (nmade > 0) {
        Py_DECREF(made[--nmade]);
    }
    return c->original(callable, args, nargsf, kwnames);
}

/* The call of entry i: NumPy's own unless an input has two dimensions or more (every call
 * on scalars, 0-d and 1-d arrays leaves at once: its loop runs as one run, which the
 * trampoline splits where it is long). Inlined in each entry's vectorcall: small calls
 * under the loop mode took 1.3-2% longer through one more jump, 0.5-1% without it. */
static inline __attribute__((always_inline)) PyObject *
strided_call(int i, PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Call *c = &calls[i];
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int two = c->nin >= 2 && nargs >= 2;
    npy_uintp bound; /* an overflow: two arrays of 2^32 elements or more take the long way */
    if (nargs >= 1 && (rows_or_casts(args[0]) || (two && rows_or_casts(args[1])))
            && (__builtin_mul_overflow(size_or_one(args[0]), two ? size_or_one(args[1]) : 1,
                                       &bound) || bound >= (npy_uintp)c->least)) {
        return admit(c, callable, args, nargsf, kwnames);
    }
    return c->original(callable, args, nargsf, kwnames);
}

/* NCALLS vectorcalls, vc<base-4 digits>, each bound to its entry */
#define V1(n, i) static PyObject *vc##n(PyObject *f, PyObject *const *a, size_t n_, \
                                        PyObject *k) { return strided_call(i, f, a, n_, k); }
#define V4(n, i) V1(n##0, 4*(i)) V1(n##1, 4*(i)+1) V1(n##2, 4*(i)+2) V1(n##3, 4*(i)+3)
#define V16(n, i) V4(n##0, 4*(i)) V4(n##1, 4*(i)+1) V4(n##2, 4*(i)+2) V4(n##3, 4*(i)+3)
#define V64(n, i) V16(n##0, 4*(i)) V16(n##1, 4*(i)+1) V16(n##2, 4*(i)+2) V16(n##3, 4*(i)+3)
V64(0, 0) V64(1, 1)
#define W1(n) vc##n,
#define W4(n) W1(n##0) W1(n##1) W1(n##2) W1(n##3)
#define W16(n) W4(n##0) W4(n##1) W4(n##2) W4(n##3)
#define W64(n) W16(n##0) W16(n##1) W16(n##2) W16(n##3)
static vectorcallfunc vectorcalls[NCALLS] = {W64(0) W64(1)};

/* ---- Python interface ---------------------------------------------------------- */

static PyUFuncObject *as_ufunc(PyObject *o)
{
    if (strcmp(Py_TYPE(o)->tp_name, "numpy.ufunc") != 0) {
        PyErr_Format(PyExc_TypeError, "expected a numpy.ufunc, got %.100s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (PyUFuncObject *)o;
}

static int find_slot(PyUFuncGenericFunction *where)
{
    for (int i = 0; i < nslots; i++) {
        if (slots[i].where == where) {
            return i;
        }
    }
    return -1;
}

static PyObject *py_replace(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int index;
    long min_split, piece;
    if (!PyArg_ParseTuple(args, "Oill", &obj, &index, &min_split, &piece)) {
        return NULL;
    }
    PyUFuncObject *uf = as_ufunc(obj);
    if (uf == NULL) {
        return NULL;
    }
    if (index < 0 || index >= uf->ntypes || uf->core_enabled || uf->nin + uf->nout > MAXARGS
            || uf->functions == NULL || uf->functions[index] == NULL) {
        PyErr_SetString(PyExc_ValueError, "no replaceable elementwise loop at that index");
        return NULL;
    }
    PyUFuncGenericFunction *where = &uf->functions[index];
    int i = find_slot(where);
    if (i < 0) {
        if (nslots == NSLOTS) {
            PyErr_SetString(PyExc_RuntimeError, "all loop slots are in use");
            return NULL;
        }
        i = nslots;
        Slot *s = &slots[i];
        s->original = hot[i].original = *where;
        s->where = where;
        s->nin = uf->nin;
        s->nout = uf->nout;
        Py_INCREF(obj);
        s->ufunc = obj;
        nslots++;
    }
    Slot *s = &slots[i];
    PyUFuncGenericFunction now = __atomic_load_n(where, __ATOMIC_ACQUIRE);
    if (now != s->original && now != trampolines[i]) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the loop was replaced by someone else since fastmath saw it");
        return NULL;
    }
    atomic_store(&s->min_split, min_split < 1 ? 1 : min_split);
    atomic_store(&s->piece, piece < 64 ? 64 : piece);
    atomic_store(&hot[i].min_split, long_path() ? 0 : atomic_load(&s->min_split));
    __atomic_store_n(where, trampolines[i], __ATOMIC_RELEASE);
    return PyLong_FromLong(i);
}

static int slot_arg(PyObject *args, Slot **out)
{
    int i;
    if (!PyArg_ParseTuple(args, "i", &i)) {
        return -1;
    }
    if (i < 0 || i >= nslots) {
        PyErr_SetString(PyExc_IndexError, "no such loop slot");
        return -1;
    }
    *out = &slots[i];
    return i;
}

static PyObject *py_restore(PyObject *self, PyObject *args)
{
    Slot *s;
    int i = slot_arg(args, &s);
    if (i < 0) {
        return NULL;
    }
    PyUFuncGenericFunction expected = trampolines[i];
    /* only ours is taken back: a loop someone else installed since stays theirs */
    int ok = __atomic_compare_exchange_n(s->where, &expected, s->original, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return PyBool_FromLong(ok);
}

static PyObject *py_installed(PyObject *self, PyObject *args)
{
    Slot *s;
    int i = slot_arg(args, &s);
    if (i < 0) {
        return NULL;
    }
    return PyBool_FromLong(__atomic_load_n(s->where, __ATOMIC_ACQUIRE) == trampolines[i]);
}

static PyObject *py_counts(PyObject *self, PyObject *args)
{
    Slot *s;
    if (slot_arg(args, &s) < 0) {
        return NULL;
    }
    return Py_BuildValue("kk", atomic_load(&s->calls), atomic_load(&s->split_calls));
}

static PyObject *py_paced(PyObject *self, PyObject *args)
{
    Slot *s;
    if (slot_arg(args, &s) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLong(atomic_load(&s->paced_calls));
}

static PyObject *py_pace(PyObject *self, PyObject *args)
{
    int i;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "in", &i, &n)) {
        return NULL;
    }
    if (i < 0 || i >= nslots || n < 1) {
        PyErr_SetString(PyExc_IndexError, "no such loop slot, or a run length below 1");
        return NULL;
    }
    return rt->pace_dict(slots[i].pace, n);
}

static PyObject *py_set_enabled(PyObject *self, PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) {
        return NULL;
    }
    return PyBool_FromLong(atomic_exchange(&enabled, on));
}

/* Set a flag that sends every run to long_run while it is on (counting, timing): under
 * the GIL, as replace() is; returns the previous setting. */
static PyObject *set_long_path(PyObject *args, atomic_int *flag)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) {
        return NULL;
    }
    int before = atomic_exchange(flag, on);
    on = long_path();
    for (int i = 0; i < nslots; i++) {
        atomic_store(&hot[i].min_split, on ? 0 : atomic_load(&slots[i].min_split));
    }
    return PyBool_FromLong(before);
}

static PyObject *py_set_counting(PyObject *self, PyObject *args)
{
    return set_long_path(args, &counting);
}

/* set_timing(bool) -> previous: while on, the time of every run the loop mode leaves whole
 * (all of them while splitting is disabled) that it could split (not a reduction's) is
 * added up; whole_ns() reads it and starts again from 0. The figure behind a workload's
 * ceiling (bench/library_workloads.py). */
static PyObject *py_set_timing(PyObject *self, PyObject *args)
{
    return set_long_path(args, &timing);
}

static PyObject *py_whole_ns(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLongLong(atomic_exchange(&whole_ns, 0));
}

/* replace_call(ufunc, slot_float32, slot_float64, slot_int64, report) -> entry: calls of
 * ufunc that NumPy would cut into rows run by rows (strided_call), with those loop slots
 * (-1: none); report(name, flags) acts on FP flags as NumPy's error state says. */
static PyObject *py_replace_call(PyObject *self, PyObject *args)
{
    PyObject *obj, *fn;
    int sl[3];
    if (!PyArg_ParseTuple(args, "OiiiO", &obj, &sl[0], &sl[1], &sl[2], &fn)) {
        return NULL;
    }
    PyUFuncObject *uf = as_ufunc(obj);
    if (uf == NULL) {
        return NULL;
    }
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "report must be callable");
        return NULL;
    }
    Py_ssize_t offset = Py_TYPE(obj)->tp_vectorcall_offset;
    if (uf->nout != 1 || uf->nin < 1 || uf->nin + 1 > MAXARGS || uf->core_enabled
            || offset <= 0) {
        PyErr_SetString(PyExc_ValueError, "replace_call takes an elementwise ufunc of one "
                        "output and up to three inputs, called by vectorcall");
        return NULL;
    }
    int out_type[3] = {-1, -1, -1};
    for (int w = 0; w < 3; w++) {
        if (sl[w] < 0) {
            continue;
        }
        if (sl[w] >= nslots || slots[sl[w]].ufunc != obj) {
            PyErr_SetString(PyExc_ValueError, "no loop slot of this ufunc at that number");
            return NULL;
        }
        npy_intp index = slots[sl[w]].where - uf->functions;
        out_type[w] = uf->types[index * uf->nargs + uf->nin];
        for (int k = 0; k < uf->nin; k++) {
            if (uf->types[index * uf->nargs + k] != loop_type[w]) {
                PyErr_SetString(PyExc_ValueError, "that slot's loop is not of that type");
                return NULL;
            }
        }
        if (out_type[w] != loop_type[w] && out_type[w] != NPY_BOOL) {
            PyErr_SetString(PyExc_ValueError, "that slot's loop writes neither its type "
                            "nor bool");
            return NULL;
        }
    }
    vectorcallfunc *where = (vectorcallfunc *)((char *)obj + offset);
    int i = 0;
    for (; i < ncalls && calls[i].ufunc != obj; i++) {
    }
    if (i == ncalls) {
        if (ncalls == NCALLS) {
            PyErr_SetString(PyExc_RuntimeError, "all call entries are in use");
            return NULL;
        }
        PyObject *name = PyObject_GetAttrString(obj, "__name__");
        if (name == NULL) {
            return NULL;
        }
        Call *c = &calls[i];
        c->ufunc = Py_NewRef(obj);
        c->original = *where;
        c->where = where;
        c->name = name;
        c->nin = uf->nin;
        ncalls++;
    }
    Call *c = &calls[i];
    vectorcallfunc now = __atomic_load_n(where, __ATOMIC_ACQUIRE);
    if (now != c->original && now != vectorcalls[i]) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the ufunc's call was replaced by someone else since fastmath saw it");
        return NULL;
    }
    c->least = NPY_MAX_INTP;
    c->reduce_way[0] = c->reduce_way[1] = -1; /* until set_reduce says */
    c->cols_how[0] = c->cols_how[1] = -1;     /* until set_reduce_cols says */
    c->full_how[0] = c->full_how[1] = -1;     /* until set_reduce_full says */
    for (int w = 0; w < 3; w++) {
        c->slot[w] = sl[w];
        c->out_type[w] = out_type[w];
        if (sl[w] >= 0 && atomic_load(&slots[sl[w]].min_split) < c->least) {
            c->least = atomic_load(&slots[sl[w]].min_split);
        }
    }
    Py_XSETREF(report, Py_NewRef(fn));
    __atomic_store_n(where, vectorcalls[i], __ATOMIC_RELEASE);
    return PyLong_FromLong(i);
}

static PyObject *py_restore_call(PyObject *self, PyObject *args)
{
    int i;
    if (!PyArg_ParseTuple(args, "i", &i)) {
        return NULL;
    }
    if (i < 0 || i >= ncalls) {
        PyErr_SetString(PyExc_IndexError, "no such call entry");
        return NULL;
    }
    vectorcallfunc expected = vectorcalls[i];
    int ok = __atomic_compare_exchange_n(calls[i].where, &expected, calls[i].original, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return PyBool_FromLong(ok);
}

/* ---- reductions along rows ------------------------------------------------------- */

/* ufunc.reduce over the last axis of a C-contiguous array of rows (np.sum(x, axis=1),
 * x.max(axis=-1)): NumPy's iterator calls the loop once a row, as loop(out, row, out) with
 * steps (0, item, 0), which for rows of 4-8 elements costs several times the loop's work
 * (200000 x 8 float64, maximum: 11 ms). Here the loop is called the same way, row by row,
 * from a plain C loop, the rows cut into pieces over the pool: each row is reduced by
 * NumPy's own loop with NumPy's own arguments, so the result is NumPy's bit for bit. How a
 * row's accumulator starts (NumPy's identity, or the row's first element) is what NumPy
 * does for that ufunc and type, found by comparing both with NumPy's results on rows of
 * special values as the loop mode starts (fastmath/integrations/_loopmode.py), and set
 * per ufunc (set_reduce); a ufunc or type it found neither for is NumPy's. Taken only for
 * an exact ndarray of float32 or float64, C-contiguous, aligned, in native byte order, of
 * two or more dimensions, reduced over its last axis alone (an int, not a tuple), with no
 * dtype=, out=, initial= or where= (other than their defaults, which np.sum and
 * ndarray.max pass on), through the loop mode's installed call entry of that ufunc. */
#ifndef REDUCE_FROM /* (a test build takes every size: -DREDUCE_FROM=2 -DREDUCE_ROWS=1) */
#define REDUCE_FROM 4096 /* elements: below, NumPy's call */
#endif
#ifndef REDUCE_ROWS
#define REDUCE_ROWS 16   /* rows: fewer, NumPy's call */
#endif

typedef struct {
    PyUFuncGenericFunction loop;
    void *data;
    char *in, *first;          /* the input's and the output's first element */
    npy_intp row, item, cols;  /* the input's row step and item size, its row length */
    int way;
    double identity;
} Reduce;

static PyMethodDef *reduce_def = NULL; /* NumPy's ufunc.reduce (its PyMethodDef) */
typedef PyObject *(*fastkw)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
static fastkw reduce_original = NULL;
static PyObject *no_value = NULL;      /* np._NoValue: initial= not given */
static PyObject *reduce_name = NULL;   /* "reduce", for the FP error report */
static atomic_ulong reduced = 0;       /* reductions along rows taken (for tests and reports) */
static atomic_ulong cols_reduced = 0;  /* reductions over the first axis taken */
static atomic_ulong full_reduced = 0;  /* reductions over every axis taken */

/* An accumulator of w items started as NumPy starts it: `way` 1, from the first values
 * (w at `first`); 0, at `identity`, in the items' type (float32 or float64). */
static void start_acc(char *acc, const char *first, npy_intp w, npy_intp item, int way,
                      double identity)
{
    if (way) {
        memcpy(acc, first, w * item);
    }
    else if (item == 8) {
        for (npy_intp j = 0; j < w; j++) {
            ((double *)acc)[j] = identity;
        }
    }
    else {
        for (npy_intp j = 0; j < w; j++) {
            ((float *)acc)[j] = (float)identity;
        }
    }
}

static void reduce_rows(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    const Reduce *r = data;
    npy_intp first = (args[0] - r->first) / r->item;
    npy_intp n = r->cols - r->way, st[3] = {0, r->item, 0};
    for (npy_intp i = first; i < first + *count; i++) {
        char *out = r->first + i * r->item, *row = r->in + i * r->row;
        start_acc(out, row, 1, r->item, r->way, r->identity);
        char *a[3] = {out, row + r->way * r->item, out};
        r->loop(a, &n, st, r->data);
    }
}

static int is_name(PyObject *name, const char *s)
{
    return PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, s) == 0;
}

/* A new output for the reduction of a over its axis `at` (the first or the last), of
 * NumPy's shape with keepdims or without; NULL with an error set. (Makes reduce_name, the
 * name the FP error report gives.) */
static PyArrayObject *reduce_out(PyArrayObject *a, int at, int keepdims)
{
    if (reduce_name == NULL && (reduce_name = PyUnicode_FromString("reduce")) == NULL) {
        return NULL;
    }
    int d = PyArray_NDIM(a);
    npy_intp shape[NPY_MAXDIMS];
    memcpy(shape, PyArray_DIMS(a), d * sizeof(npy_intp));
    if (keepdims) {
        shape[at] = 1;
    }
    else {
        memmove(shape + at, shape + at + 1, (d - 1 - at) * sizeof(npy_intp));
    }
    return (PyArrayObject *)PyArray_SimpleNew(keepdims ? d : d - 1, shape, PyArray_TYPE(a));
}

/* The reduction of a by c's loop `which` with NumPy's arguments, or NULL with an error set;
 * split over the pool where the pacing says so, unless `whole`. */
static PyObject *reduce_call(Call *c, PyArrayObject *a, int which, int keepdims, int way,
                             int whole)
{
    Slot *s = &slots[c->slot[which]];
    npy_intp cols = PyArray_DIM(a, PyArray_NDIM(a) - 1);
    PyArrayObject *out = reduce_out(a, PyArray_NDIM(a) - 1, keepdims);
    if (out == NULL) {
        return NULL;
    }
    PyUFuncObject *uf = (PyUFuncObject *)c->ufunc;
    Reduce r;
    r.loop = s->original;
    r.data = uf->data[s->where - uf->functions];
    r.in = PyArray_BYTES(a);
    r.first = PyArray_BYTES(out);
    r.item = PyArray_ITEMSIZE(a);
    r.cols = cols;
    r.row = cols * r.item;
    r.way = way;
    r.identity = c->identity;
    /* a piece: the loop's piece to split, in rows (at least one) */
    npy_intp piece = atomic_load_explicit(&s->piece, memory_order_relaxed) / cols;
    return run_job(s, s->reduce, reduce_rows, &r, r.item, PyArray_SIZE(out),
                   piece < 1 ? 1 : piece, !whole, reduce_name, out, 0, NULL);
}

/* ---- reductions over the first axis ------------------------------------------------ */

/* ufunc.reduce over the first axis of a C-contiguous array (x.sum(axis=0), np.max(x,
 * axis=0) of N rows of M elements): NumPy's iterator starts the output as a row is started
 * above (the identity, or the first row) and calls the loop once a row, as loop(out,
 * row, out) with n = M and steps (item, item, item); for the tall, narrow arrays of
 * statistics (500000 x 6, maximum: 14 ms) that is 28 ns a row around a loop of six
 * elements. Here the same calls are made from a plain C loop (run whole: 500000 x 6,
 * maximum, 7.6 ms; 200000 x 8, add, 3.5 -> 1.3 ms), and split over the pool in one of two
 * ways, each allowed for a ufunc and type only where the loop mode found its results
 * NumPy's bit for bit as it started (fastmath/integrations/_loopmode.py, _way_to_split):
 * - COLS_PARTS: the rows in parts, each part folded by calls of n = M into an accumulator
 *   of its own, the parts' accumulators then folded into the first, in order, by the same
 *   loop (maximum, minimum, fmax, fmin: their result is one of the values, chosen by one
 *   rule at each column whatever the grouping; checked on signed zeros and NaNs of both
 *   signs). 500000 x 6, maximum: 3.9 ms.
 * - COLS_BLOCKS: the columns in blocks of a multiple of 64, the last block with the rest
 *   (a row's last elements are the loop's tail, as in NumPy's call: cut elsewhere, NaNs
 *   of both signs came out of additions with the other sign), each block its rows in
 *   NumPy's order (add and multiply: the same rounded operation however the loop is cut).
 *   Only blocks of 2048 columns or more: each thread makes a call a row of its blocks,
 *   and narrower blocks lost to the call run whole (4000 x 250 float64, add: 0.60 ms in
 *   blocks of 64-122 columns, 0.30 ms whole, NumPy's 0.48 ms).
 * (Intel Xeon, 2 threads.) Where neither applies, the reduction runs whole. */
enum { COLS_BLOCKS = 0, COLS_PARTS = 1 };
#define COLS_BLOCK_MIN 64           /* a block's columns: a multiple of these */
#define COLS_BLOCK_SPLIT 2048       /* and at least these where split */
#define COLS_PART_MIN 8             /* rows a part at least */
#define COLS_PARTIALS (4 << 20)     /* bytes of the parts' accumulators at most */

typedef struct {
    PyUFuncGenericFunction loop;
    void *data;
    char *in, *out, *partials;  /* partials: an accumulator a part after the first */
    npy_intp rows, cols, item;  /* N rows of M columns, of item bytes */
    npy_intp width, part;       /* columns a block, rows a part */
    npy_intp units;             /* the blocks or parts */
    int how, way, one_by_one;   /* one_by_one: the units run apart even when run whole */
    double identity;
    atomic_int parted;          /* a part ran alone: the accumulators to fold (cols_join) */
} Cols;

/* rows [r0, r1) of columns [c0, c0 + w) folded into acc as NumPy folds them */
static void cols_fold(const Cols *r, char *acc, npy_intp r0, npy_intp r1, npy_intp c0,
                      npy_intp w)
{
    npy_intp st[3] = {r->item, r->item, r->item};
    npy_intp step = r->cols * r->item;
    char *row = r->in + r0 * step + c0 * r->item;
    start_acc(acc, row, w, r->item, r->way, r->identity);
    row += r->way * step; /* (begun at the first row: the loop runs over the rest) */
    for (npy_intp i = r0 + r->way; i < r1; i++, row += step) {
        char *a[3] = {acc, row, acc};
        r->loop(a, &w, st, r->data);
    }
}

/* the job's loop: units [u0, u0 + count), its items, are blocks or parts; all of them at
 * once (the call run whole) is NumPy's sequence of calls */
static void cols_units(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    Cols *r = data;
    npy_intp u0 = args[0] - r->out; /* (items of one byte from the output's start) */
    if (u0 == 0 && *count >= r->units && !r->one_by_one) {
        cols_fold(r, r->out, 0, r->rows, 0, r->cols);
        return;
    }
    for (npy_intp u = u0; u < u0 + *count; u++) {
        if (r->how == COLS_BLOCKS) {
            npy_intp c0 = u * r->width, w = u == r->units - 1 ? r->cols - c0 : r->width;
            cols_fold(r, r->out + c0 * r->item, 0, r->rows, c0, w);
        }
        else {
            npy_intp r0 = u * r->part, r1 = r0 + r->part < r->rows ? r0 + r->part : r->rows;
            char *acc = u == 0 ? r->out : r->partials + (u - 1) * r->cols * r->item;
            cols_fold(r, acc, r0, r1, 0, r->cols);
            atomic_store_explicit(&r->parted, 1, memory_order_relaxed);
        }
    }
}

/* after a split by parts: the parts' accumulators folded into the first, in order */
static void cols_join(void *data)
{
    Cols *r = data;
    if (!atomic_load_explicit(&r->parted, memory_order_relaxed)) {
        return;
    }
    npy_intp st[3] = {r->item, r->item, r->item}, n = r->cols;
    for (npy_intp u = 1; u < r->units; u++) {
        char *a[3] = {r->out, r->partials + (u - 1) * r->cols * r->item, r->out};
        r->loop(a, &n, st, r->data);
    }
}

/* The reduction of a over its first axis by c's loop `which`, split `how` (or run whole:
 * how -1), or NULL with an error set; `units` > 0: that many blocks or parts, run one by
 * one in this thread (the loop mode's check of a way to split). */
static PyObject *cols_call(Call *c, PyArrayObject *a, int which, int keepdims, int how,
                           npy_intp units)
{
    Slot *s = &slots[c->slot[which]];
    npy_intp rows = PyArray_DIM(a, 0);
    PyArrayObject *out = reduce_out(a, 0, keepdims);
    if (out == NULL) {
        return NULL;
    }
    PyUFuncObject *uf = (PyUFuncObject *)c->ufunc;
    Cols r;
    r.loop = s->original;
    r.data = uf->data[s->where - uf->functions];
    r.in = PyArray_BYTES(a);
    r.out = PyArray_BYTES(out);
    r.partials = NULL;
    r.rows = rows;
    r.cols = rows > 0 ? PyArray_SIZE(a) / rows : 0;
    r.item = PyArray_ITEMSIZE(a);
    r.way = c->reduce_way[which];
    r.identity = c->identity;
    r.how = how;
    r.width = r.cols;
    r.part = r.rows;
    r.units = 1;
    r.one_by_one = units > 0;
    atomic_init(&r.parted, 0);
    int threads = rt->threads();
    if (how == COLS_BLOCKS && (units > 0 || threads > 1)) {
        npy_intp want = units > 0 ? units : 2 * (npy_intp)threads;
        npy_intp w = (r.cols + want - 1) / want; /* in whole blocks of 64 columns */
        w = units > 0 || w >= COLS_BLOCK_SPLIT ? w : COLS_BLOCK_SPLIT;
        r.width = (w + COLS_BLOCK_MIN - 1) / COLS_BLOCK_MIN * COLS_BLOCK_MIN;
        r.units = r.cols / r.width > 1 ? r.cols / r.width : 1; /* the last: the rest too */
    }
    else if (how == COLS_PARTS && (units > 0 || threads > 1)) {
        npy_intp most = COLS_PARTIALS / (r.cols * r.item) + 1; /* the accumulators' bound */
        npy_intp want = units > 0 ? units : 4 * (npy_intp)threads;
        want = units > 0 || want <= most ? want : most;
        npy_intp p = (r.rows + want - 1) / want;
        r.part = units > 0 || p >= COLS_PART_MIN ? p : COLS_PART_MIN;
        r.units = (r.rows + r.part - 1) / r.part;
        if (r.units > 1) {
            r.partials = PyMem_RawMalloc((r.units - 1) * r.cols * r.item);
            if (r.partials == NULL) {
                Py_DECREF(out);
                return PyErr_NoMemory();
            }
        }
    }
    PyObject *done = run_job(s, s->cols, cols_units, &r, 1, r.units, 1,
                             units == 0 && r.units > 1, reduce_name, out, PyArray_SIZE(a),
                             r.how == COLS_PARTS ? cols_join : NULL);
    PyMem_RawFree(r.partials);
    return done;
}

/* ---- reductions over every axis ---------------------------------------------------- */

/* ufunc.reduce over every axis of a C-contiguous array (x.sum(), np.mean(x), np.max(x),
 * a 1-d array's np.add.reduce(x)): NumPy's iterator makes one call of the loop over all n
 * elements, loop(out, x + way, out) with steps (0, item, 0), out started as a row is
 * started above (the identity, or the first element; one call of 10^7 float64 elements,
 * add: 2.5 ms on one thread). Split over the pool in one of two ways, each allowed for a
 * ufunc and type only where the loop mode found its results NumPy's bit for bit as it
 * started (fastmath/integrations/_loopmode.py, _full_way):
 * - FULL_TREE (add): NumPy's add loop sums in pairs (pairwise_sum, numpy/_core/src/umath/
 *   loops_utils.h.src): a run of more than 128 elements is the sum of its two halves, the
 *   first n/2 long rounded down to a multiple of 8. The run is cut along that same tree
 *   into 2^depth leaves, each summed by NumPy's loop into an accumulator begun at -0.0
 *   (which leaves every sum as it is, signed zeros included), and the leaves' sums are
 *   added up the tree as NumPy's recursion adds them, then to the start.
 * - FULL_PARTS (maximum, minimum, fmax, fmin): the run in parts, each folded from its
 *   first element by the loop, the parts' results then folded into the first in order
 *   (their result is one of the values, picked by one rule whatever the grouping).
 * Run whole, it is NumPy's one call. */
enum { FULL_TREE = 0, FULL_PARTS = 1 };
#ifndef FULL_FROM
#define FULL_FROM 8192     /* elements: below, NumPy's call (a sum of 8192 float64: 2.4-3.5 us) */
#endif
#define FULL_MOST 256      /* leaves or parts at most */
#define FULL_PAIRWISE 128  /* pairwise_sum's block: a longer run is cut in two */

typedef struct {
    PyUFuncGenericFunction loop;
    void *data;
    char *in, *out;           /* out: the 0-d (or keepdims) result */
    npy_intp n, item;         /* the array's n elements of item bytes */
    npy_intp units;           /* leaves or parts */
    npy_intp at[FULL_MOST + 1]; /* unit u: elements [at[u], at[u + 1]) */
    union { double d[FULL_MOST]; float f[FULL_MOST]; } acc; /* a unit's result */
    int how, way, one_by_one;
    double identity;
    atomic_int parted;        /* a unit ran alone: the results to join (full_join) */
} Full;

/* the leaves of pairwise_sum's tree over elements [from, from + m), `depth` levels down,
 * in order, into r->at from index *k; 0 where a node to cut is not longer than a block */
static int full_leaves(Full *r, npy_intp from, npy_intp m, int depth, npy_intp *k)
{
    if (depth == 0) {
        r->at[(*k)++] = from;
        return 1;
    }
    if (m <= FULL_PAIRWISE) {
        return 0;
    }
    npy_intp half = m / 2;
    half -= half % 8;
    return full_leaves(r, from, half, depth - 1, k)
           && full_leaves(r, from + half, m - half, depth - 1, k);
}

/* unit u's result, in the items' type */
static char *full_acc(Full *r, npy_intp u) { return (char *)&r->acc + u * r->item; }

/* NumPy's one call: the output started as NumPy starts it, the loop over the rest */
static void full_whole(const Full *r)
{
    npy_intp st[3] = {0, r->item, 0}, m = r->n - r->way;
    start_acc(r->out, r->in, 1, r->item, r->way, r->identity);
    char *a[3] = {r->out, r->in + r->way * r->item, r->out};
    r->loop(a, &m, st, r->data);
}

/* the job's loop: units [u0, u0 + count); all of them at once (the call run whole) is
 * NumPy's one call */
static void full_units(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    Full *r = data;
    npy_intp u0 = args[0] - r->out; /* (items of one byte from the output's start) */
    npy_intp st[3] = {0, r->item, 0};
    if (u0 == 0 && *count >= r->units && !r->one_by_one) {
        full_whole(r);
        return;
    }
    for (npy_intp u = u0; u < u0 + *count; u++) {
        char *acc = full_acc(r, u), *first = r->in + r->at[u] * r->item;
        npy_intp m = r->at[u + 1] - r->at[u];
        if (r->how == FULL_TREE) {
            start_acc(acc, NULL, 1, r->item, 0, -0.0);
        }
        else {
            memcpy(acc, first, r->item); /* (a part begins at its first element) */
            first += r->item;
            m -= 1;
        }
        char *a[3] = {acc, first, acc};
        r->loop(a, &m, st, r->data);
    }
    atomic_store_explicit(&r->parted, 1, memory_order_relaxed);
}

/* after a split: the units' results joined into the output as NumPy's one call joins them */
static void full_join(void *data)
{
    Full *r = data;
    if (!atomic_load_explicit(&r->parted, memory_order_relaxed)) {
        return;
    }
    if (r->how == FULL_PARTS) {
        npy_intp st[3] = {0, r->item, 0}, m = r->units - 1;
        memcpy(r->out, full_acc(r, 0), r->item);
        char *a[3] = {r->out, full_acc(r, 1), r->out};
        if (m > 0) {
            r->loop(a, &m, st, r->data);
        }
        return;
    }
    for (npy_intp u = 0; u < r->units; u++) {
        if (r->item == 8 ? r->acc.d[u] != r->acc.d[u] : r->acc.f[u] != r->acc.f[u]) {
            /* A leaf's sum is a NaN: which NaN comes out of two meeting in a sum is the
             * first operand's, and which operand is first in NumPy's recursion is its
             * compiler's choice. NumPy's one call then, as run whole (its FP flags are
             * the leaves' and the tree's: the same additions). */
            full_whole(r);
            return;
        }
    }
    for (npy_intp w = r->units; w > 1; w /= 2) { /* up the tree: a node, its halves' sum */
        for (npy_intp i = 0; i < w / 2; i++) {
            if (r->item == 8) {
                r->acc.d[i] = r->acc.d[2 * i] + r->acc.d[2 * i + 1];
            }
            else {
                r->acc.f[i] = r->acc.f[2 * i] + r->acc.f[2 * i + 1];
            }
        }
    }
    start_acc(r->out, r->in, 1, r->item, r->way, r->identity);
    if (r->item == 8) {
        *(double *)r->out += r->acc.d[0];
    }
    else {
        *(float *)r->out += r->acc.f[0];
    }
}

/* The reduction of a over every axis by c's loop `which`, split `how` (or run whole: how
 * -1), or NULL with an error set; `units` > 0: that many leaves (a power of two) or
 * parts, run one by one in this thread (the loop mode's check of a way to split). Returns
 * NumPy's scalar, or with keepdims an array of ones in every dimension. */
static PyObject *full_call(Call *c, PyArrayObject *a, int which, int keepdims, int how,
                           npy_intp units)
{
    Slot *s = &slots[c->slot[which]];
    npy_intp shape[NPY_MAXDIMS];
    for (int k = 0; k < PyArray_NDIM(a); k++) {
        shape[k] = 1;
    }
    if (reduce_name == NULL && (reduce_name = PyUnicode_FromString("reduce")) == NULL) {
        return NULL;
    }
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(
        keepdims ? PyArray_NDIM(a) : 0, shape, PyArray_TYPE(a));
    if (out == NULL) {
        return NULL;
    }
    PyUFuncObject *uf = (PyUFuncObject *)c->ufunc;
    Full *r = PyMem_RawMalloc(sizeof(Full));
    if (r == NULL) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    r->loop = s->original;
    r->data = uf->data[s->where - uf->functions];
    r->in = PyArray_BYTES(a);
    r->out = PyArray_BYTES(out);
    r->n = PyArray_SIZE(a);
    r->item = PyArray_ITEMSIZE(a);
    r->way = c->reduce_way[which];
    r->identity = c->identity;
    r->how = how;
    r->one_by_one = units > 0;
    r->units = 1;
    r->at[0] = how == FULL_TREE ? r->way : 0;
    r->at[1] = r->n;
    atomic_init(&r->parted, 0);
    int threads = rt->threads();
    if (how >= 0 && (units > 0 || threads > 1)) {
        /* units about FM_PIECE_BYTES each, four a thread at least, FULL_MOST at most */
        npy_intp want = units > 0 ? units : r->n * r->item / FM_PIECE_BYTES;
        want = units > 0 || want >= 4 * threads ? want : 4 * threads;
        want = want < FULL_MOST ? want : FULL_MOST;
        if (how == FULL_TREE) {
            npy_intp m = r->n - r->way, k = 0;
            int depth = 0;
            while (((npy_intp)2 << depth) <= want) {
                depth++;
            }
            while (depth > 0 && !(k = 0, full_leaves(r, r->way, m, depth, &k))) {
                depth--; /* (a node not longer than a block: a shallower tree) */
            }
            r->units = (npy_intp)1 << depth;
            r->at[r->units] = r->n;
        }
        else {
            npy_intp p = (r->n + want - 1) / want;
            p = units > 0 ? p : (p + 63) & ~(npy_intp)63; /* parts start 64-element aligned */
            r->units = (r->n + p - 1) / p;
            for (npy_intp u = 0; u < r->units; u++) {
                r->at[u] = u * p;
            }
            r->at[r->units] = r->n;
        }
    }
    PyObject *done = run_job(s, s->full, full_units, r, 1, r->units, 1,
                             units == 0 && r->units > 1, reduce_name, out, r->n, full_join);
    PyMem_RawFree(r);
    return done == NULL ? NULL : PyArray_Return((PyArrayObject *)done);
}

/* NumPy's ufunc.reduce(array, axis=0, dtype=None, out=None, keepdims=False, initial=<no
 * value>, where=True), taken here where reduce_call can make it (see above). */
static PyObject *fm_reduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || nargs < 1 || nargs > 7
            || !PyArray_CheckExact(args[0])) {
        goto numpy;
    }
    PyArrayObject *a = (PyArrayObject *)args[0];
    int d = PyArray_NDIM(a), t = PyArray_TYPE(a);
    if (d < 1 || (t != NPY_FLOAT && t != NPY_DOUBLE) || !PyArray_IS_C_CONTIGUOUS(a)
            || !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a)
            || PyArray_SIZE(a) < REDUCE_FROM) {
        goto numpy;
    }
    int i = 0;
    for (; i < ncalls && calls[i].ufunc != self; i++) {
    }
    if (i == ncalls) {
        goto numpy;
    }
    Call *c = &calls[i];
    int which = t == NPY_DOUBLE;
    if (c->slot[which] < 0 || c->reduce_way[which] < 0
            || __atomic_load_n(c->where, __ATOMIC_ACQUIRE) != vectorcalls[i]) {
        goto numpy; /* not taken, or the loop mode's call entry is not installed now */
    }
    /* the arguments by position: array, axis, dtype, out, keepdims, initial, where */
    PyObject *given[7] = {NULL};
    for (Py_ssize_t k = 0; k < nargs; k++) {
        given[k] = args[k];
    }
    static const char *const names[7] = {"array", "axis", "dtype", "out", "keepdims",
                                         "initial", "where"};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int at = 1;
        for (; at < 7 && !is_name(name, names[at]); at++) {
        }
        if (at == 7 || given[at] != NULL) {
            goto numpy; /* NumPy's error, or an argument it names otherwise */
        }
        given[at] = args[nargs + k];
    }
    PyObject *axis = given[1];
    int full = axis == Py_None; /* over every axis (a 1-d array's over its one axis too) */
    long ax = 0;
    if (!full) {
        if (axis != NULL && !PyLong_CheckExact(axis)) {
            goto numpy; /* a tuple, a bool or an index type: NumPy's */
        }
        ax = axis == NULL ? 0 : PyLong_AsLong(axis); /* (axis 0 by default) */
        if (ax == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto numpy;
        }
        full = d == 1 && (ax == 0 || ax == -1);
    }
    if ((given[2] != NULL && given[2] != Py_None) || (given[3] != NULL && given[3] != Py_None)
            || (given[4] != NULL && given[4] != Py_True && given[4] != Py_False)
            || (given[5] != NULL && given[5] != no_value)
            || (given[6] != NULL && given[6] != Py_True)) {
        goto numpy;
    }
    if (full) {
        if (c->full_how[which] < 0 || PyArray_SIZE(a) < FULL_FROM) {
            goto numpy;
        }
        atomic_fetch_add_explicit(&full_reduced, 1, memory_order_relaxed);
        return full_call(c, a, which, given[4] == Py_True, c->full_how[which], 0);
    }
    if (d < 2) {
        goto numpy; /* (NumPy's error for an axis out of range) */
    }
    int last = ax == -1 || ax == d - 1; /* else the first: ax 0 or -d */
    if (last ? PyArray_DIM(a, d - 1) < 2 || PyArray_SIZE(a) / PyArray_DIM(a, d - 1) < REDUCE_ROWS
             : (ax != 0 && ax != -d) || c->cols_how[which] < 0
               || PyArray_DIM(a, 0) < REDUCE_ROWS || PyArray_SIZE(a) / PyArray_DIM(a, 0) < 2) {
        goto numpy; /* (one column: NumPy's iterator drops the other axes and sums in pairs) */
    }
    if (!last) { /* blocks where there are columns enough, else parts, else whole */
        int ways = c->cols_how[which];
        int how = ways & (1 << COLS_BLOCKS) && PyArray_SIZE(a) / PyArray_DIM(a, 0)
                                                >= 2 * COLS_BLOCK_SPLIT ? COLS_BLOCKS
                  : ways & (1 << COLS_PARTS) ? COLS_PARTS : -1;
        atomic_fetch_add_explicit(&cols_reduced, 1, memory_order_relaxed);
        return cols_call(c, a, which, given[4] == Py_True, how, 0);
    }
    atomic_fetch_add_explicit(&reduced, 1, memory_order_relaxed);
    return reduce_call(c, a, which, given[4] == Py_True, c->reduce_way[which], 0);
numpy:
    return reduce_original(self, args, nargs, kwnames);
}

/* replace_reduce(descr, no_value) -> bool: ufunc.reduce (the method descriptor of
 * np.ufunc's "reduce") runs fm_reduce, which takes what it can and calls NumPy's for the
 * rest; False where the descriptor is not one fastmath knows how to take. A single store
 * of the method's C function, as replace() stores a loop: a call reads the old or the
 * new, both valid. */
static PyObject *py_replace_reduce(PyObject *self, PyObject *args)
{
    PyObject *descr, *nv;
    if (!PyArg_ParseTuple(args, "OO", &descr, &nv)) {
        return NULL;
    }
    if (Py_TYPE(descr) != &PyMethodDescr_Type) {
        Py_RETURN_FALSE;
    }
    PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
    if (def->ml_flags != (METH_FASTCALL | METH_KEYWORDS)) {
        Py_RETURN_FALSE;
    }
    if (reduce_def == NULL) {
        reduce_def = def;
        reduce_original = (fastkw)(void (*)(void))def->ml_meth;
        no_value = Py_NewRef(nv);
    }
    else if (def != reduce_def) {
        Py_RETURN_FALSE;
    }
    __atomic_store_n(&reduce_def->ml_meth, (PyCFunction)(void (*)(void))fm_reduce,
                     __ATOMIC_RELEASE);
    Py_RETURN_TRUE;
}

static PyObject *py_restore_reduce(PyObject *self, PyObject *noargs)
{
    if (reduce_def != NULL) {
        __atomic_store_n(&reduce_def->ml_meth,
                         (PyCFunction)(void (*)(void))reduce_original, __ATOMIC_RELEASE);
    }
    Py_RETURN_NONE;
}

/* set_reduce(entry, way32, way64, identity): how NumPy starts a row's accumulator for the
 * call entry's ufunc, by its float32 and float64 loops (-1: not taken) */
static PyObject *py_set_reduce(PyObject *self, PyObject *args)
{
    int i, w[2];
    double identity;
    if (!PyArg_ParseTuple(args, "iiid", &i, &w[0], &w[1], &identity)) {
        return NULL;
    }
    if (i < 0 || i >= ncalls || w[0] < -1 || w[0] > 1 || w[1] < -1 || w[1] > 1) {
        PyErr_SetString(PyExc_ValueError, "no such call entry, or a way not -1, 0 or 1");
        return NULL;
    }
    PyUFuncObject *uf = (PyUFuncObject *)calls[i].ufunc;
    if ((w[0] >= 0 || w[1] >= 0) && (uf->nin != 2 || uf->nout != 1)) {
        PyErr_SetString(PyExc_ValueError, "only a binary ufunc of one output reduces");
        return NULL;
    }
    calls[i].identity = identity;
    for (int k = 0; k < 2; k++) {
        calls[i].reduce_way[k] = calls[i].slot[k] >= 0 ? w[k] : -1;
    }
    Py_RETURN_NONE;
}

/* reduce_rows(entry, which, way, array, keepdims) -> what reduce_call makes of array, run
 * whole, in that way: for the loop mode's check of how NumPy starts a row */
static PyObject *py_reduce_rows(PyObject *self, PyObject *args)
{
    int i, which, way, keepdims;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "iiiOp", &i, &which, &way, &obj, &keepdims)) {
        return NULL;
    }
    if (i < 0 || i >= ncalls || which < 0 || which > 1 || calls[i].slot[which] < 0
            || way < 0 || way > 1 || ((PyUFuncObject *)calls[i].ufunc)->nin != 2) {
        PyErr_SetString(PyExc_ValueError, "no such reducing loop, or a way not 0 or 1");
        return NULL;
    }
    if (!PyArray_CheckExact(obj) || PyArray_NDIM((PyArrayObject *)obj) < 2
            || PyArray_TYPE((PyArrayObject *)obj) != (which ? NPY_DOUBLE : NPY_FLOAT)
            || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj)
            || !PyArray_ISALIGNED((PyArrayObject *)obj)
            || PyArray_DIM((PyArrayObject *)obj, PyArray_NDIM((PyArrayObject *)obj) - 1)
               < 1 + way) {
        PyErr_SetString(PyExc_ValueError, "a C-contiguous array of the loop's type, of two "
                        "or more dimensions and rows long enough");
        return NULL;
    }
    return reduce_call(&calls[i], (PyArrayObject *)obj, which, keepdims, way, 1);
}

/* The call entry of a set_reduce_cols/set_reduce_full call and its float32 and float64
 * ways (h), each within -1 to `most`, set only where set_reduce said how NumPy starts a
 * row, and one that folds parts (`parts`) only where that start is a value; -1 with an
 * error set */
static int entry_and_ways(PyObject *args, int most, int (*parts)(int), int h[2])
{
    int i;
    if (!PyArg_ParseTuple(args, "iii", &i, &h[0], &h[1])) {
        return -1;
    }
    if (i < 0 || i >= ncalls || h[0] < -1 || h[0] > most || h[1] < -1 || h[1] > most) {
        PyErr_Format(PyExc_ValueError, "no such call entry, or a way not within -1 to %d", most);
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        if (h[k] >= 0 && calls[i].reduce_way[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "set_reduce first: how NumPy starts a row");
            return -1;
        }
        if (parts(h[k]) && calls[i].reduce_way[k] != 1) {
            PyErr_SetString(PyExc_ValueError, "parts need an accumulator begun at a value");
            return -1;
        }
    }
    return i;
}

static int cols_parts(int how) { return how > 0 && how & (1 << COLS_PARTS); }

/* set_reduce_cols(entry, ways32, ways64): how a reduction over the first axis by the call
 * entry's float32 and float64 loops may be split (bits 1 << COLS_BLOCKS, 1 << COLS_PARTS;
 * 0: run whole only; -1: not taken) */
static PyObject *py_set_reduce_cols(PyObject *self, PyObject *args)
{
    int h[2], i = entry_and_ways(args, 3, cols_parts, h);
    if (i < 0) {
        return NULL;
    }
    calls[i].cols_how[0] = h[0];
    calls[i].cols_how[1] = h[1];
    Py_RETURN_NONE;
}

/* The arguments of reduce_cols/reduce_full (entry, which, how, array, keepdims, units),
 * checked but for the array: a reducing loop, a way -1 (whole), 0, or 1 (parts, which need
 * an accumulator begun at a value: COLS_PARTS == FULL_PARTS), units within 1 to `most`; 0
 * with an error set */
static int reduce_args(PyObject *args, npy_intp most, int *i, int *which, int *how,
                       PyArrayObject **a, int *keepdims, Py_ssize_t *units)
{
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "iiiOpn", i, which, how, &obj, keepdims, units)) {
        return 0;
    }
    if (*i < 0 || *i >= ncalls || *which < 0 || *which > 1 || calls[*i].slot[*which] < 0
            || calls[*i].reduce_way[*which] < 0 || *how < -1 || *how > 1 || *units < 1
            || *units > most || (*how == 1 && calls[*i].reduce_way[*which] != 1)) {
        if (most == NPY_MAX_INTP) {
            PyErr_SetString(PyExc_ValueError, "no such reducing loop, a way not -1, 0 or 1, or "
                            "units under 1");
        }
        else {
            PyErr_Format(PyExc_ValueError, "no such reducing loop, a way not -1, 0 or 1, or "
                         "units not within 1 to %zd", (Py_ssize_t)most);
        }
        return 0;
    }
    *a = (PyArrayObject *)obj;
    return 1;
}

/* reduce_cols(entry, which, how, array, keepdims, units) -> what cols_call makes of array,
 * its blocks or parts (`how`; -1: none) `units` of them, run one by one in this thread:
 * for the loop mode's check of a way to split */
static PyObject *py_reduce_cols(PyObject *self, PyObject *args)
{
    int i, which, how, keepdims;
    Py_ssize_t units;
    PyArrayObject *a;
    if (!reduce_args(args, NPY_MAX_INTP, &i, &which, &how, &a, &keepdims, &units)) {
        return NULL;
    }
    PyObject *obj = (PyObject *)a;
    if (!PyArray_CheckExact(obj) || PyArray_NDIM(a) < 2
            || PyArray_TYPE(a) != (which ? NPY_DOUBLE : NPY_FLOAT)
            || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)
            || PyArray_DIM(a, 0) < 1 + calls[i].reduce_way[which]
            || PyArray_SIZE(a) / PyArray_DIM(a, 0) < 1
            || (how == COLS_PARTS && PyArray_DIM(a, 0) < units)) {
        PyErr_SetString(PyExc_ValueError, "a C-contiguous array of the loop's type, of two "
                        "or more dimensions, with rows or columns enough for the units");
        return NULL;
    }
    return cols_call(&calls[i], a, which, keepdims, how, how < 0 ? 0 : units);
}

static int full_parts(int how) { return how == FULL_PARTS; }

/* set_reduce_full(entry, how32, how64): how a reduction over every axis by the call entry's
 * float32 and float64 loops is split (FULL_TREE, FULL_PARTS; -1: not taken) */
static PyObject *py_set_reduce_full(PyObject *self, PyObject *args)
{
    int h[2], i = entry_and_ways(args, 1, full_parts, h);
    if (i < 0) {
        return NULL;
    }
    calls[i].full_how[0] = h[0];
    calls[i].full_how[1] = h[1];
    Py_RETURN_NONE;
}

/* reduce_full(entry, which, how, array, keepdims, units) -> what full_call makes of array,
 * cut `how` (-1: run whole) into `units` leaves (a power of two) or parts, run one by one
 * in this thread: for the loop mode's check of a way to split */
static PyObject *py_reduce_full(PyObject *self, PyObject *args)
{
    int i, which, how, keepdims;
    Py_ssize_t units;
    PyArrayObject *a;
    if (!reduce_args(args, FULL_MOST, &i, &which, &how, &a, &keepdims, &units)) {
        return NULL;
    }
    if (how == FULL_TREE && (units & (units - 1))) {
        PyErr_SetString(PyExc_ValueError, "the leaves of a tree: a power of two");
        return NULL;
    }
    PyObject *obj = (PyObject *)a;
    if (!PyArray_CheckExact(obj) || PyArray_NDIM(a) < 1
            || PyArray_TYPE(a) != (which ? NPY_DOUBLE : NPY_FLOAT)
            || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)
            || PyArray_SIZE(a) < units + calls[i].reduce_way[which]) {
        PyErr_SetString(PyExc_ValueError, "a C-contiguous array of the loop's type with "
                        "elements enough for the units");
        return NULL;
    }
    return full_call(&calls[i], a, which, keepdims, how, how < 0 ? 0 : units);
}

static PyObject *py_reduced_full(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLong(atomic_load(&full_reduced));
}

static PyObject *py_reduced_cols(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLong(atomic_load(&cols_reduced));
}

static PyObject *py_reduced(PyObject *self, PyObject *noargs)
{
    return PyLong_FromUnsignedLong(atomic_load(&reduced));
}

/* ---- np.place ------------------------------------------------------------------- */

/* NumPy's place(arr, mask, vals) (numpy/_core/src/multiarray/compiled_base.c, arr_place)
 * walks the mask on one thread and copies each value through the dtype's copyswap: the one
 * single-threaded step left in scipy.stats' cdf (three calls over 10^7 elements, 30-40 ms
 * of about 200 under the loop mode). Here the same walk is cut into blocks: the pool counts
 * each block's true elements, the counts give each block its first value (the running
 * count modulo the number of values, as NumPy cycles them), and the pool copies. Every
 * element written is the one NumPy writes; arrays it does not take are left to NumPy. */
#define PLACE_BLOCK 1024 /* the runtime's pieces hold 64 blocks or more: 2 pieces from 2^17 */
#define PLACE_MIN 65536

typedef struct {
    const char *mask;
    char *arr;
    const char *vals;
    npy_intp n, nv, *counts;
    int msize, isize;
} Place;

static fm_pace place_paces[2][FM_BUCKETS];

/* The loops below, for each mask width M and item width T: plain loops the compiler
 * vectorizes where it can (the count), one switch a block. */
#define PLACE_COUNT(M)                                                                    \
    for (npy_intp i = lo; i < hi; i++) {                                                  \
        c += ((const M *)p->mask)[i] != 0;                                                \
    }
#define PLACE_COPY(M, T)                                                                  \
    for (npy_intp i = lo; i < hi; i++) {                                                  \
        if (((const M *)p->mask)[i] != 0) {                                               \
            ((T *)p->arr)[i] = ((const T *)p->vals)[j];                                   \
            j = j + 1 == p->nv ? 0 : j + 1;                                               \
        }                                                                                 \
    }
#define PLACE_COPY_ITEMS(M)                                                               \
    switch (p->isize) {                                                                   \
    case 1: PLACE_COPY(M, npy_uint8) break;                                               \
    case 2: PLACE_COPY(M, npy_uint16) break;                                              \
    case 4: PLACE_COPY(M, npy_uint32) break;                                              \
    default: PLACE_COPY(M, npy_uint64) break;                                             \
    }

static void place_count(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    Place *p = data;
    npy_intp first = (npy_intp *)args[0] - p->counts;
    for (npy_intp b = first; b < first + *count; b++) {
        npy_intp lo = b * PLACE_BLOCK, hi = lo + PLACE_BLOCK < p->n ? lo + PLACE_BLOCK : p->n;
        npy_intp c = 0;
        switch (p->msize) {
        case 1: PLACE_COUNT(npy_uint8) break;
        case 2: PLACE_COUNT(npy_uint16) break;
        case 4: PLACE_COUNT(npy_uint32) break;
        default: PLACE_COUNT(npy_uint64) break;
        }
        p->counts[b] = c;
    }
}

static void place_copy(char **args, intptr_t const *count, intptr_t const *steps, void *data)
{
    Place *p = data;
    npy_intp first = (npy_intp *)args[0] - p->counts;
    for (npy_intp b = first; b < first + *count; b++) {
        npy_intp lo = b * PLACE_BLOCK, hi = lo + PLACE_BLOCK < p->n ? lo + PLACE_BLOCK : p->n;
        npy_intp j = p->counts[b] % p->nv; /* the running count before the block */
        switch (p->msize) {
        case 1: PLACE_COPY_ITEMS(npy_uint8) break;
        case 2: PLACE_COPY_ITEMS(npy_uint16) break;
        case 4: PLACE_COPY_ITEMS(npy_uint32) break;
        default: PLACE_COPY_ITEMS(npy_uint64) break;
        }
    }
}

/* One pass over the blocks on the pool (whole where the pacing says so); whether it split. */
static int place_pass(fm_pace *paces, fm_loop loop, Place *p, npy_intp blocks)
{
    fm_job job;
    job.timed = 0;
    job.loop = loop;
    job.data = p;
    job.nargs = 1;
    job.args[0] = (char *)p->counts;
    job.steps[0] = sizeof(npy_intp);
    job.n = blocks;
    job.piece = 1;
    int how = rt->split(paces, &job, 0);
    if (how == FM_NOT_RUN) {
        intptr_t all = blocks;
        loop(job.args, &all, job.steps, p);
    }
    return how == FM_SPLIT;
}

static int plain_items(PyArrayObject *a)
{
    int size = (int)PyArray_ITEMSIZE(a);
    return PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a) && PyArray_ISNOTSWAPPED(a)
           && !PyDataType_REFCHK(PyArray_DESCR(a))
           && (size == 1 || size == 2 || size == 4 || size == 8);
}

static int overlap(PyArrayObject *a, PyArrayObject *b)
{
    char *alo = PyArray_BYTES(a), *ahi = alo + PyArray_NBYTES(a);
    char *blo = PyArray_BYTES(b), *bhi = blo + PyArray_NBYTES(b);
    return alo < bhi && blo < ahi;
}

/* place(arr, mask, vals) -> 2 (a pass split over the pool) or 1 (run whole), or None where
 * it does not take the call (NumPy's then) */
static PyObject *py_place(PyObject *self, PyObject *args)
{
    PyObject *ao, *mo, *vo;
    if (!PyArg_ParseTuple(args, "OOO", &ao, &mo, &vo)) {
        return NULL;
    }
    if (!PyArray_CheckExact(ao) || !PyArray_CheckExact(mo) || !PyArray_CheckExact(vo)) {
        Py_RETURN_NONE;
    }
    PyArrayObject *a = (PyArrayObject *)ao, *m = (PyArrayObject *)mo, *v = (PyArrayObject *)vo;
    char mkind = PyArray_DESCR(m)->kind;
    npy_intp n = PyArray_SIZE(a);
    if (n < PLACE_MIN || PyArray_SIZE(m) != n || PyArray_SIZE(v) < 1
            || !PyArray_ISWRITEABLE(a) || !plain_items(a) || !plain_items(m)
            || !plain_items(v) || (mkind != 'b' && mkind != 'i' && mkind != 'u')
            || !PyArray_EquivTypes(PyArray_DESCR(a), PyArray_DESCR(v))
            || overlap(a, m) || overlap(a, v)) {
        Py_RETURN_NONE;
    }
    npy_intp blocks = (n + PLACE_BLOCK - 1) / PLACE_BLOCK;
    npy_intp *counts = PyMem_RawMalloc(blocks * sizeof(npy_intp));
    if (counts == NULL) {
        return PyErr_NoMemory();
    }
    Place p = {PyArray_BYTES(m), PyArray_BYTES(a), PyArray_BYTES(v), n, PyArray_SIZE(v),
               counts, (int)PyArray_ITEMSIZE(m), (int)PyArray_ITEMSIZE(a)};
    int split;
    Py_BEGIN_ALLOW_THREADS
    split = place_pass(place_paces[0], place_count, &p, blocks);
    npy_intp total = 0;
    for (npy_intp b = 0; b < blocks; b++) { /* each block's count -> the count before it */
        npy_intp c = counts[b];
        counts[b] = total;
        total += c;
    }
    if (total > 0) {
        split |= place_pass(place_paces[1], place_copy, &p, blocks);
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(counts);
    return PyLong_FromLong(split ? 2 : 1);
}

static PyMethodDef methods[] = {
    {"replace", py_replace, METH_VARARGS,
     "replace(ufunc, index, min_split, piece) -> slot: install the splitting loop"},
    {"restore", py_restore, METH_VARARGS, "restore(slot) -> bool: put the original back"},
    {"installed", py_installed, METH_VARARGS, "installed(slot) -> bool"},
    {"counts", py_counts, METH_VARARGS,
     "counts(slot) -> (calls counted, split calls): calls only while set_counting(True)"},
    {"set_counting", py_set_counting, METH_VARARGS,
     "set_counting(bool) -> previous: count every call (each then takes the long path)"},
    {"paced", py_paced, METH_VARARGS,
     "paced(slot) -> runs long enough to split that the back-off ran in one piece"},
    {"pace", py_pace, METH_VARARGS,
     "pace(slot, n) -> {left, skip, since, kept, one_thread}: the back-off record of runs of\n"
     "about n elements (one_thread: seconds a whole run of n takes lately, or None)"},
    {"replace_call", py_replace_call, METH_VARARGS,
     "replace_call(ufunc, slot_float32, slot_float64, slot_int64, report) -> entry: calls\n"
     "that NumPy would cut into rows (broadcast, strided) run by rows over the pool"},
    {"restore_call", py_restore_call, METH_VARARGS,
     "restore_call(entry) -> bool: put NumPy's call back"},
    {"set_enabled", py_set_enabled, METH_VARARGS, "set_enabled(bool) -> previous"},
    {"set_timing", py_set_timing, METH_VARARGS, "set_timing(bool) -> previous"},
    {"replace_reduce", py_replace_reduce, METH_VARARGS,
     "replace_reduce(descr, no_value) -> bool: ufunc.reduce along rows (see _loops.c)"},
    {"restore_reduce", py_restore_reduce, METH_NOARGS, "restore_reduce(): NumPy's again"},
    {"set_reduce", py_set_reduce, METH_VARARGS,
     "set_reduce(entry, way32, way64, identity): how NumPy starts a row (-1: not taken)"},
    {"reduce_rows", py_reduce_rows, METH_VARARGS,
     "reduce_rows(entry, which, way, array, keepdims) -> the rows reduced that way, whole"},
    {"reduced", py_reduced, METH_NOARGS, "reduced() -> reductions taken along rows"},
    {"set_reduce_cols", py_set_reduce_cols, METH_VARARGS,
     "set_reduce_cols(entry, how32, how64): how a reduction over the first axis splits"},
    {"reduce_cols", py_reduce_cols, METH_VARARGS,
     "reduce_cols(entry, which, how, array, keepdims, units) -> it, units run apart"},
    {"reduced_cols", py_reduced_cols, METH_NOARGS,
     "reduced_cols() -> reductions taken over the first axis"},
    {"set_reduce_full", py_set_reduce_full, METH_VARARGS,
     "set_reduce_full(entry, how32, how64): how a reduction over every axis splits"},
    {"reduce_full", py_reduce_full, METH_VARARGS,
     "reduce_full(entry, which, how, array, keepdims, units) -> full_call's result"},
    {"reduced_full", py_reduced_full, METH_NOARGS,
     "reduced_full() -> reductions taken over every axis"},
    {"whole_ns", py_whole_ns, METH_NOARGS, "whole_ns() -> ns of the runs left whole, reset"},
    {"place", py_place, METH_VARARGS,
     "place(arr, mask, vals) -> 2 (split) or 1 (whole), or None where it leaves the call to\n"
     "NumPy: np.place\n"
     "for C-contiguous arrays of plain items (vals of arr's dtype, a bool or integer mask,\n"
     "none overlapping arr), by blocks on the pool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath.integrations._loops",
    "NumPy's ufunc inner loops split over a native thread pool (see fastmath/integrations/_loops.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__loops(void)
{
    import_array(); /* place() reads arrays through NumPy's C API */
    rt = fm_import();
    if (rt == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
