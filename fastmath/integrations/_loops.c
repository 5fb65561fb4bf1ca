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
 * foreach() (for fastmath.foreach) runs one such loop, the one NumPy's own call would run
 * (numpy.ufunc._get_strided_loop), over each array of a list, the list cut into pieces
 * that the caller and the pool's threads take in turn: no Python call per array, and each
 * array's FP flags kept apart, for the caller to report in list order. The pool is woken
 * before the caller makes the outputs (which needs the GIL), and its threads start on the
 * first arrays while the caller makes the outputs of the later ones.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#include <fenv.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "../dispatch/_npy_loop.h"
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


/* Split one run over the runtime's pool (fm_split: it runs whole where splits lose now);
 * 0 when it could not (the caller then runs the original loop). */
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
    int how = rt->split(s->pace, &job, 0);
    if (how == FM_SPLIT) {
        atomic_fetch_add_explicit(&s->split_calls, 1, memory_order_relaxed);
    }
    else if (how == FM_WHOLE_PACED) {
        atomic_fetch_add_explicit(&s->paced_calls, 1, memory_order_relaxed);
    }
    return how != FM_NOT_RUN;
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
static __attribute__((noinline)) void long_run(Slot *s, char **args, npy_intp const *dims,
                                               npy_intp const *steps, void *data)
{
    npy_intp n = dims[0];
    if (atomic_load_explicit(&counting, memory_order_relaxed)) {
        /* a plain load and store, not a locked add: a count for reports, where a rare lost
         * increment under contention costs less than a bus lock on every run */
        atomic_store_explicit(&s->calls,
                              atomic_load_explicit(&s->calls, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    }
    if (!(n >= atomic_load_explicit(&s->min_split, memory_order_relaxed)
            && atomic_load_explicit(&enabled, memory_order_relaxed)
            && independent(s, args, n, steps) && split(s, args, n, steps, data))) {
        s->original(args, dims, steps, data);
    }
}

static inline void run_slot(int i, char **args, npy_intp const *dims, npy_intp const *steps,
                            void *data)
{
    Hot *h = &hot[i];
    if (dims[0] >= atomic_load_explicit(&h->min_split, memory_order_relaxed)) {
        long_run(&slots[i], args, dims, steps, data);
        return;
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

/* ---- foreach: one ufunc loop over a list of arrays ------------------------------- */

#define MAXLOOPS 16

typedef struct {
    PyArray_Descr *in, *out;
    CallInfo *info;
    npy_intp strides[2];
} Loop;

typedef struct {
    char *args[2];
    npy_intp n;
    const Loop *loop;
    Py_ssize_t index; /* in the list */
    int flags;        /* NumPy's UFUNC_FPE_* bits this item raised */
} Item;

/* Run.ready: the items made so far; with CLOSED added, every item there will be. */
#define CLOSED ((npy_intp)1 << 62)
/* Pauses (some 50 us) a thread spends waiting for items in the making before it sleeps
 * between looks: the caller makes an item in a fraction of the time one takes to run,
 * unless it was descheduled or has a long out= list to check. */
#define SPINS 2000

typedef struct {
    atomic_int failed; /* a loop returned an error */
    int stop;          /* one thread only: stop after an item raising any of these flags */
    npy_intp ran;      /* the items run: fewer than all only where stop stopped them */
    Item *items;
    _Atomic npy_intp ready;
} Run;

/* A job's "loop" (see run_pieces): args[0] is the first of *count items, run once they
 * are made. Each item's flags are its own, as NumPy's check after one call per array
 * would see them. */
static void run_items(char **args, npy_intp const *count, npy_intp const *steps, void *data)
{
    (void)steps;
    Run *run = data;
    Item *it = (Item *)args[0];
    npy_intp first = it - run->items, end = first + *count;
    for (int spins = 0;; spins++) {
        npy_intp ready = atomic_load_explicit(&run->ready, memory_order_acquire);
        if (ready & CLOSED) {
            end = end < (ready & ~CLOSED) ? end : ready & ~CLOSED;
            break;
        }
        if (ready >= end) {
            break;
        }
        if (spins < SPINS) {
            RELAX();
        }
        else {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
    feclearexcept(ERRORS);
    for (npy_intp k = first; k < end; k++, it++) {
        if (it->n == 0) {
            continue;
        }
        const Loop *lp = it->loop;
        if (lp->info->strided_loop(lp->info->context, it->args, &it->n, lp->strides,
                                   lp->info->auxdata) < 0) {
            atomic_store(&run->failed, 1);
            return;
        }
        int raised = fetestexcept(ERRORS);
        if (raised) {
            it->flags = lp->info->no_floatingpoint_errors ? 0 : fpe_bits(raised);
            feclearexcept(ERRORS);
            if (it->flags & run->stop) { /* one thread, which started from the first */
                run->ran = k + 1;
                return;
            }
        }
    }
}

typedef struct {
    char *lo, *hi;
    int out;
} Extent;

static int by_start(const void *a, const void *b)
{
    const Extent *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts extents by start unless they already are: arrays allocated one after another
 * usually lie in list order, and glibc's qsort takes about 100 us for 2000 extents even
 * then (as much as the pool saves on a list of 1000 x 1000 float64). */
static void sort_extents(Extent *e, npy_intp m)
{
    for (npy_intp k = 1; k < m; k++) {
        if (e[k].lo < e[k - 1].lo) {
            qsort(e, (size_t)m, sizeof(Extent), by_start);
            return;
        }
    }
}

/* Whether an output's memory meets any other item's input or output: then the items
 * must run one after another in list order, as a loop of calls would. Inputs and
 * outputs are sorted apart (each side often is already) and merged. */
static int entangled(const Item *items, npy_intp n)
{
    Extent *e = PyMem_Malloc(sizeof(Extent) * (size_t)(2 * n + 1));
    if (e == NULL) {
        return 1;
    }
    Extent *o = e + n; /* inputs from e[0], outputs from o[0] */
    npy_intp ni = 0, no = 0;
    for (npy_intp i = 0; i < n; i++) {
        npy_intp bytes = items[i].n * items[i].loop->strides[0];
        npy_intp obytes = items[i].n * items[i].loop->strides[1];
        if (bytes == 0) {
            continue;
        }
        if (items[i].args[0] != items[i].args[1]) { /* in place: one extent for both */
            e[ni++] = (Extent){items[i].args[0], items[i].args[0] + bytes, 0};
        }
        o[no++] = (Extent){items[i].args[1], items[i].args[1] + obytes, 1};
    }
    sort_extents(e, ni);
    sort_extents(o, no);
    char *any = NULL, *outs = NULL; /* the furthest end seen so far, of any and of outputs */
    int found = 0;
    for (npy_intp a = 0, b = 0; (a < ni || b < no) && !found;) {
        const Extent *x = b == no || (a < ni && e[a].lo < o[b].lo) ? &e[a++] : &o[b++];
        found = x->lo < (x->out ? any : outs);
        if (any == NULL || x->hi > any) {
            any = x->hi;
        }
        if (x->out && (outs == NULL || x->hi > outs)) {
            outs = x->hi;
        }
    }
    PyMem_Free(e);
    return found;
}

static int parse_loops(PyObject *loops, Loop *out)
{
    if (!PyTuple_Check(loops) || PyTuple_GET_SIZE(loops) > MAXLOOPS) {
        PyErr_Format(PyExc_TypeError, "loops must be a tuple of at most %d entries", MAXLOOPS);
        return -1;
    }
    int n = (int)PyTuple_GET_SIZE(loops);
    for (int j = 0; j < n; j++) {
        PyObject *in, *o, *cap;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(loops, j), "O!O!O", &PyArrayDescr_Type, &in,
                              &PyArrayDescr_Type, &o, &cap)) {
            return -1;
        }
        CallInfo *info = PyCapsule_GetPointer(cap, CALL_INFO);
        if (info == NULL) {
            return -1;
        }
        if (info->strided_loop == NULL || info->requires_pyapi) {
            PyErr_SetString(PyExc_ValueError,
                            "the loop is not filled in (ufunc._get_strided_loop) or needs the GIL");
            return -1;
        }
        out[j].in = (PyArray_Descr *)in;
        out[j].out = (PyArray_Descr *)o;
        out[j].info = info;
        out[j].strides[0] = PyDataType_ELSIZE(out[j].in);
        out[j].strides[1] = PyDataType_ELSIZE(out[j].out);
    }
    return n;
}


/* The loop for array x, or NULL when NumPy's call would do more than run it over x's
 * memory in order: a cast, another layout, a 0-d result (a scalar), or a subclass. */
static const Loop *loop_for(PyObject *x, const Loop *loops, int nloops, npy_intp limit)
{
    if (Py_TYPE(x) != &PyArray_Type) {
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)x;
    if (PyArray_NDIM(a) == 0 || (PyArray_FLAGS(a) & NEED) != NEED || PyArray_SIZE(a) >= limit) {
        return NULL;
    }
    for (int j = 0; j < nloops; j++) {
        if (PyArray_DESCR(a) == loops[j].in) {
            return &loops[j];
        }
    }
    return NULL;
}

/* out= for x takes the loop's output as it is: same shape and dtype, writable, and either
 * x itself (in place) or apart from it (NumPy would buffer a partial overlap). */
static int takes_out(PyObject *o, PyArrayObject *x, const Loop *lp)
{
    if (Py_TYPE(o) != &PyArray_Type) {
        return 0;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    int nd = PyArray_NDIM(a);
    if ((PyArray_FLAGS(a) & (NEED | NPY_ARRAY_WRITEABLE)) != (NEED | NPY_ARRAY_WRITEABLE)
            || PyArray_DESCR(a) != lp->out || nd != PyArray_NDIM(x)
            || memcmp(PyArray_DIMS(a), PyArray_DIMS(x), sizeof(npy_intp) * (size_t)nd) != 0) {
        return 0;
    }
    char *xlo = PyArray_BYTES(x), *olo = PyArray_BYTES(a);
    if (xlo == olo && lp->strides[0] == lp->strides[1]) {
        return 1;
    }
    npy_intp n = PyArray_SIZE(x);
    return xlo + n * lp->strides[0] <= olo || olo + n * lp->strides[1] <= xlo;
}

/* Appends i (and with out=, every index after it: what comes after an item left to the
 * caller waits for it) to left; -1 on error. */
static int leave(PyObject *left, Py_ssize_t i, Py_ssize_t n, int tail)
{
    for (Py_ssize_t r = i; r < (tail ? n : i + 1); r++) {
        PyObject *k = PyLong_FromSsize_t(r);
        int bad = k == NULL || PyList_Append(left, k) < 0;
        Py_XDECREF(k);
        if (bad) {
            return -1;
        }
    }
    return 0;
}

static PyObject *py_foreach(PyObject *self, PyObject *args)
{
    PyObject *loops_obj, *ins_obj, *outs_obj, *results;
    Py_ssize_t limit, min_parallel, piece;
    int threads, pace_id = -1, stop = 0;
    if (!PyArg_ParseTuple(args, "OOOO!nnni|ii", &loops_obj, &ins_obj, &outs_obj, &PyList_Type,
                          &results, &limit, &min_parallel, &piece, &threads, &pace_id, &stop)) {
        return NULL;
    }
    fm_pace *pace = pace_id < 0 ? NULL : rt->pace_by_id(pace_id);
    if (pace_id >= 0 && pace == NULL) {
        PyErr_SetString(PyExc_ValueError, "pace must come from _runtime.new_pace(), or be -1");
        return NULL;
    }
    if (PyArray_API == NULL && _import_array() < 0) {
        return NULL;
    }
    threads = threads > 256 ? 256 : threads;
    Loop loops[MAXLOOPS];
    int nloops = parse_loops(loops_obj, loops);
    if (nloops < 0) {
        return NULL;
    }
    PyObject *ins = PySequence_Tuple(ins_obj); /* holds the arrays while the GIL is free */
    if (ins == NULL) {
        return NULL;
    }
    PyObject *outs = outs_obj == Py_None ? NULL : PySequence_Tuple(outs_obj);
    Py_ssize_t n = PyTuple_GET_SIZE(ins);
    PyObject *left = NULL;
    Item *items = NULL;
    if (outs_obj != Py_None && outs == NULL) {
        goto fail;
    }
    if ((outs != NULL && PyTuple_GET_SIZE(outs) != n) || PyList_GET_SIZE(results) != n) {
        PyErr_SetString(PyExc_ValueError, "ins, outs and results must have one entry each");
        goto fail;
    }
    items = PyMem_Malloc(sizeof(Item) * (size_t)(n + 1));
    left = PyList_New(0);
    if (items == NULL || left == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    stop = outs == NULL ? 0 : stop; /* new outputs: nothing is seen before the caller's */

    /* A first look (what a loop takes, as below, less out='s checks): a list worth the
     * pool wakes it now, so that its threads start on the first items while this one
     * makes the outputs of the next (about 0.1 us for each of 1000 x 1000 float64, an
     * eighth of the time one takes to run) or checks the out= list. */
    npy_intp most = 0, most_total = 0;
    for (Py_ssize_t i = 0; threads > 1 && !stop && i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(ins, i);
        if (loop_for(x, loops, nloops, limit) != NULL) {
            most++;
            most_total += PyArray_SIZE((PyArrayObject *)x);
        }
    }
    Run run = {.stop = stop, .items = items};
    atomic_init(&run.failed, 0);
    atomic_init(&run.ready, 0);
    fm_job job;
    job.timed = 0;
    job.loop = run_items;
    job.data = &run;
    job.nargs = 1;
    job.args[0] = (char *)items;
    job.steps[0] = sizeof(Item);
    job.n = most;
    job.piece = most_total > 0 ? piece * most / most_total : 1;
    if (job.piece * threads > most) { /* short of a piece per thread: equal shares */
        job.piece = (most + threads - 1) / threads;
    }
    job.piece = job.piece < 1 ? 1 : job.piece;
    /* The runtime's pacing decides, as for every split: on the pool while that finishes
     * sooner than this thread alone, measured on lists of about this many elements. */
    int how = FM_NOT_RUN, pooled = 0, most_threads = rt->threads();
    long long t0 = 0;
    threads = threads > most_threads ? most_threads : threads; /* threadpoolctl's limit */
    if (threads > 1 && most >= 2 && most_total >= min_parallel
            && rt->begin()) { /* else busy: this thread does it all */
        int timed = 0;
        how = pace != NULL ? rt->decide(pace, most_total, &timed) : FM_SPLIT;
        job.timed = timed;
        t0 = pace != NULL ? rt->wall_ns() : 0;
        pooled = how == FM_SPLIT && rt->start(&job, threads);
        if (!pooled) {
            rt->end();
            how = how == FM_SPLIT ? FM_NOT_RUN : how;
        }
    }
    int timing = pace != NULL && how != FM_NOT_RUN;

    npy_intp m = 0, total = 0, allocated = 0;
    int bad = 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        PyObject *x = PyTuple_GET_ITEM(ins, i);
        const Loop *lp = loop_for(x, loops, nloops, limit);
        PyObject *o = NULL;
        if (lp != NULL && outs != NULL) {
            o = PyTuple_GET_ITEM(outs, i);
            if (!takes_out(o, (PyArrayObject *)x, lp)) {
                lp = NULL;
            }
            else {
                Py_INCREF(o);
            }
        }
        else if (lp != NULL) {
            Py_INCREF(lp->out);
            PyArrayObject *a = (PyArrayObject *)x;
            o = PyArray_NewFromDescr(&PyArray_Type, lp->out, PyArray_NDIM(a), PyArray_DIMS(a),
                                     NULL, NULL, 0, NULL);
            if (o == NULL) {
                bad = 1;
                break;
            }
            allocated += PyArray_NBYTES((PyArrayObject *)o);
        }
        if (lp == NULL) {
            bad = leave(left, i, n, outs != NULL) < 0;
            if (outs != NULL) {
                break;
            }
            continue;
        }
        PyList_SetItem(results, i, o); /* steals o; drops what was there */
        Item *it = &items[m];
        it->args[0] = PyArray_BYTES((PyArrayObject *)x);
        it->args[1] = PyArray_BYTES((PyArrayObject *)o);
        it->n = PyArray_SIZE((PyArrayObject *)x);
        it->loop = lp;
        it->index = i;
        it->flags = 0;
        total += it->n;
        m++;
        if (outs == NULL) { /* out= items wait for the overlap check */
            atomic_store_explicit(&run.ready, m, memory_order_release);
        }
    }
    /* the pool's threads take out= items only where they may run in any order */
    int apart = outs == NULL
                || (!bad && m >= 2 && total >= min_parallel && !entangled(items, m));
    atomic_store_explicit(&run.ready, (apart ? m : 0) | CLOSED, memory_order_release);
    run.ran = m;
    npy_intp all = m;
    char *first = (char *)items;
    Py_BEGIN_ALLOW_THREADS
    if (pooled) {
        rt->finish(&job);
        rt->end();
    }
    if (!bad && !(pooled && apart)) { /* this thread alone */
        atomic_store_explicit(&run.ready, m | CLOSED, memory_order_relaxed);
        run_items(&first, &all, NULL, &run);
    }
    if (timing && !bad && run.ran == m) {
        long long wall = rt->wall_ns() - t0;
        if (how != FM_SPLIT) {
            rt->kept(pace, most_total, wall);
        }
        else if (apart) { /* (out= items that overlap ran here alone: nothing to judge) */
            rt->judge(pace, most_total, wall, job.timed ? rt->alone_ns(&job) : -1, job.woke);
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        goto fail;
    }
    if (atomic_load(&run.failed)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "NumPy's loop failed in foreach");
        }
        goto fail;
    }
    if (run.ran < m) { /* stopped (out= given, so left is a tail): the rest is left too */
        PyObject *tail = PyList_New(0);
        for (npy_intp k = run.ran; tail != NULL && k < m; k++) {
            PyObject *i = PyLong_FromSsize_t(items[k].index);
            if (i == NULL || PyList_Append(tail, i) < 0) {
                Py_CLEAR(tail);
            }
            Py_XDECREF(i);
        }
        if (tail == NULL || PyList_SetSlice(tail, PyList_GET_SIZE(tail),
                                            PyList_GET_SIZE(tail), left) < 0) {
            Py_XDECREF(tail);
            goto fail;
        }
        Py_SETREF(left, tail);
        m = run.ran;
    }
    PyObject *flags = Py_None;
    for (npy_intp k = 0; k < m; k++) {
        if (items[k].flags) {
            flags = NULL;
            break;
        }
    }
    if (flags == NULL) { /* per array of the list; 0 for those left */
        flags = PyBytes_FromStringAndSize(NULL, n);
        if (flags == NULL) {
            goto fail;
        }
        char *f = PyBytes_AS_STRING(flags);
        memset(f, 0, (size_t)n);
        for (npy_intp k = 0; k < m; k++) {
            f[items[k].index] = (char)items[k].flags;
        }
    }
    else {
        Py_INCREF(flags);
    }
    PyMem_Free(items);
    Py_DECREF(ins);
    Py_XDECREF(outs);
    return Py_BuildValue("NNnn", flags, left, (Py_ssize_t)allocated, (Py_ssize_t)total);

fail:
    PyMem_Free(items);
    Py_DECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(left);
    return NULL;
}

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
    atomic_store(&hot[i].min_split, atomic_load(&counting) ? 0 : atomic_load(&s->min_split));
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
    fm_pace *pace = rt->pace_of(slots[i].pace, n);
    unsigned ps = rt->one_thread_ps(pace);
    PyObject *one = ps ? PyFloat_FromDouble(ps * 1e-12 * (double)n) : Py_NewRef(Py_None);
    if (one == NULL) {
        return NULL;
    }
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:N}", "left", atomic_load(&pace->left),
                         "skip", atomic_load(&pace->skip), "since", atomic_load(&pace->since),
                         "kept", atomic_load(&pace->kept), "one_thread", one);
}

static PyObject *py_set_enabled(PyObject *self, PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) {
        return NULL;
    }
    return PyBool_FromLong(atomic_exchange(&enabled, on));
}

static PyObject *py_set_counting(PyObject *self, PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) {
        return NULL;
    }
    int before = atomic_exchange(&counting, on);
    for (int i = 0; i < nslots; i++) { /* under the GIL, as replace() is */
        atomic_store(&hot[i].min_split, on ? 0 : atomic_load(&slots[i].min_split));
    }
    return PyBool_FromLong(before);
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
    {"set_enabled", py_set_enabled, METH_VARARGS, "set_enabled(bool) -> previous"},
    {"foreach", py_foreach, METH_VARARGS,
     "foreach(loops, ins, outs, results, limit, min_parallel, piece, threads, pace=-1, stop=0)\n"
     "-> (flags, left, bytes allocated, elements): NumPy's loop over each array of ins,\n"
     "into outs (or new arrays) set in results; with outs, stop after an array raising\n"
     "flags & stop"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath.integrations._loops",
    "NumPy's ufunc inner loops split over a native thread pool (see fastmath/integrations/_loops.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__loops(void)
{
    rt = PyCapsule_Import(FM_CAPSULE, 0);
    if (rt == NULL) {
        return NULL;
    }
    if (rt->version != FM_API_VERSION) {
        PyErr_Format(PyExc_ImportError, "fastmath.dispatch._runtime has interface %d, not %d: "
                     "rebuild fastmath", rt->version, FM_API_VERSION);
        return NULL;
    }
    return PyModule_Create(&module);
}
