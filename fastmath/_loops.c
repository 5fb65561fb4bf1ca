/* fastmath._loops: NumPy's own ufunc inner loops, split over a native thread pool.
 *
 * A ufunc keeps one inner-loop pointer per type signature (ufunc->functions[i]); NumPy
 * looks it up on every call, whoever calls (an operator, a library's bound name, pandas'
 * __array_ufunc__). replace() stores, in that slot, a trampoline of ours that knows the
 * original loop. A short run goes straight to the original (one extra call); a long run
 * is cut into pieces that the calling thread and the pool's threads run, each piece by
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <numpy/ufuncobject.h>

#include <fenv.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define NSLOTS 1024
#define MAXARGS 4
#define MAXTHREADS 256
#define FLAGS (FE_DIVBYZERO | FE_OVERFLOW | FE_UNDERFLOW | FE_INVALID | FE_INEXACT)

typedef struct {
    PyUFuncGenericFunction original; /* set once, never cleared */
    PyUFuncGenericFunction *where;   /* &ufunc->functions[i] */
    PyObject *ufunc;                 /* a strong reference: the slot outlives removal */
    int nin, nout;
    atomic_long min_split;           /* elements from which a run is split */
    atomic_long piece;               /* elements per piece */
    atomic_ulong calls, split_calls;
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

/* ---- the pool ---------------------------------------------------------------- */

typedef struct {
    PyUFuncGenericFunction loop;
    void *data;
    char *args[MAXARGS];
    npy_intp steps[MAXARGS];
    int nargs;
    npy_intp n, piece;
    atomic_long next;   /* next piece's first element */
    atomic_int flags;   /* FP flags raised in workers */
    int active;         /* workers on this job now (under lock) */
    fenv_t env;
} Job;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER; /* held by the job's caller */
static Job *current = NULL;
static unsigned long generation = 0;
static int nworkers = 0;       /* threads started */
static atomic_int nthreads = 0; /* threads per job, the caller included; 0: not set yet */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void run_pieces(Job *job)
{
    for (;;) {
        npy_intp start = atomic_fetch_add_explicit(&job->next, job->piece, memory_order_relaxed);
        if (start >= job->n) {
            return;
        }
        npy_intp count = job->n - start < job->piece ? job->n - start : job->piece;
        char *args[MAXARGS];
        for (int k = 0; k < job->nargs; k++) {
            args[k] = job->args[k] + start * job->steps[k];
        }
        job->loop(args, &count, job->steps, job->data);
    }
}

static void *worker(void *unused)
{
    (void)unused;
    unsigned long seen = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (current == NULL || generation == seen) {
            pthread_cond_wait(&wake, &lock);
        }
        seen = generation;
        Job *job = current;
        job->active++;
        pthread_mutex_unlock(&lock);

        fesetenv(&job->env);
        feclearexcept(FLAGS);
        run_pieces(job);
        int raised = fetestexcept(FLAGS);
        if (raised) {
            atomic_fetch_or(&job->flags, raised);
        }
        pthread_mutex_lock(&lock);
        if (--job->active == 0) {
            pthread_cond_signal(&done);
        }
    }
    return NULL;
}

static void after_fork_in_child(void)
{
    /* the pool's threads did not come along; the next split starts new ones */
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&busy, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&done, NULL);
    current = NULL;
    nworkers = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

static int default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        return CPU_COUNT(&set);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* workers wanted: start any missing (under lock); returns how many are running */
static int ensure_workers(int wanted)
{
    pthread_once(&atfork_once, register_atfork);
    while (nworkers < wanted) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            break;
        }
        nworkers++;
    }
    return nworkers < wanted ? nworkers : wanted;
}

/* Split one run; 0 when it could not (the caller then runs the original loop). */
static int split(Slot *s, char **args, npy_intp n, const npy_intp *steps, void *data)
{
    int threads = atomic_load_explicit(&nthreads, memory_order_relaxed);
    if (threads <= 1 || pthread_mutex_trylock(&busy) != 0) {
        return 0;
    }
    Job job;
    job.loop = s->original;
    job.data = data;
    job.nargs = s->nin + s->nout;
    job.n = n;
    job.piece = atomic_load_explicit(&s->piece, memory_order_relaxed);
    if (job.piece * threads > n) { /* short of a piece per thread: equal shares */
        job.piece = (n + threads - 1) / threads;
    }
    job.piece = (job.piece + 63) & ~(npy_intp)63; /* pieces start 64-element aligned */
    atomic_init(&job.next, 0);
    atomic_init(&job.flags, 0);
    for (int k = 0; k < job.nargs; k++) {
        job.args[k] = args[k];
        job.steps[k] = steps[k];
    }
    fegetenv(&job.env);

    pthread_mutex_lock(&lock);
    int helpers = ensure_workers(threads - 1);
    if (helpers == 0) {
        pthread_mutex_unlock(&lock);
        pthread_mutex_unlock(&busy);
        return 0;
    }
    job.active = 0;
    current = &job;
    generation++;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);

    run_pieces(&job);

    /* Every piece is taken. Workers that joined finish theirs; one not yet woken (its core
     * busy elsewhere) finds no job and is not waited for. */
    pthread_mutex_lock(&lock);
    current = NULL;
    while (job.active > 0) {
        pthread_cond_wait(&done, &lock);
    }
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&busy);

    int raised = atomic_load(&job.flags);
    if (raised) {
        feraiseexcept(raised);
    }
    atomic_fetch_add_explicit(&s->split_calls, 1, memory_order_relaxed);
    return 1;
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

static PyObject *py_set_threads(PyObject *self, PyObject *args)
{
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) {
        return NULL;
    }
    if (n < 0 || n > MAXTHREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 0 (all usable cores) to %d, got %d",
                     MAXTHREADS, n);
        return NULL;
    }
    atomic_store(&nthreads, n == 0 ? default_threads() : n);
    Py_RETURN_NONE;
}

static PyObject *py_threads(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(atomic_load(&nthreads));
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
    {"set_enabled", py_set_enabled, METH_VARARGS, "set_enabled(bool) -> previous"},
    {"set_threads", py_set_threads, METH_VARARGS, "set_threads(n): threads per split, 0: all"},
    {"threads", py_threads, METH_NOARGS, "threads per split"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath._loops",
    "NumPy's ufunc inner loops split over a native thread pool (see fastmath/_loops.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__loops(void)
{
    atomic_store(&nthreads, default_threads());
    return PyModule_Create(&module);
}
