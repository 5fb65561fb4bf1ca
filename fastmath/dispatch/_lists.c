/* fastmath.dispatch._lists: the list runner of fastmath.foreach, on the native runtime.
 *
 * foreach() runs one of NumPy's ufunc loops, the one NumPy's own call would run
 * (numpy.ufunc._get_strided_loop), over each array of a list, the list cut into pieces
 * that the caller and the threads of fastmath's one pool (fastmath/dispatch/_runtime.c,
 * reached through its capsule) take in turn: no Python call per array, and each array's
 * FP flags kept apart, for the caller to report in list order. The pool is woken before
 * the caller makes the outputs (which needs the GIL), and its threads start on the first
 * arrays while the caller makes the outputs of the later ones. Whether a list splits is
 * the runtime's pacing (decide/kept/judge), by the pace record the caller names.
 *
 * What NumPy's call would do more than run the loop over an array's memory in order (a
 * cast, another layout, a scalar result, a subclass; an array of `limit` elements or
 * more) is left to the caller, by index. With out=, an output whose memory meets another
 * array's makes the list run in this thread in list order, as a loop of calls would; and
 * with `stop`, the list stops after the first array raising any of those flags.
 *
 * The numpy backend's list kernel (fastmath/backends/numpy.py) calls it.
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

#include "_npy_loop.h"
#include "_runtime.h"

static const fm_api *rt; /* the runtime's pool and pacing */

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
    clear_raised(ERRORS);
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
            rt->judge(pace, most_total, wall, job.timed ? rt->alone_ns(&job) : -1, job.woke,
                      fm_came(&job));
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

static PyMethodDef methods[] = {
    {"foreach", py_foreach, METH_VARARGS,
     "foreach(loops, ins, outs, results, limit, min_parallel, piece, threads, pace=-1, stop=0)\n"
     "-> (flags, left, bytes allocated, elements): NumPy's loop over each array of ins,\n"
     "into outs (or new arrays) set in results; with outs, stop after an array raising\n"
     "flags & stop"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath.dispatch._lists",
    "NumPy's ufunc loop over a list of arrays on the native runtime "
    "(see fastmath/dispatch/_lists.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__lists(void)
{
    rt = fm_import();
    if (rt == NULL) {
        return NULL;
    }
    import_array();
    return PyModule_Create(&module);
}
