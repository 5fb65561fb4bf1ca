/* The ufuncs' fast path in C: ``Ufunc._hot`` (fastmath/frontends/_ufunc.py) without a
 * Python frame.
 *
 * A fastmath ufunc called with small operands under ``auto`` hands them straight to the
 * reference. In Python that test costs nearly as much as NumPy's whole call on ten
 * elements (a frame, a keyword dict, a context-variable read): under ``fastmath.patch()``
 * every ``np.exp`` in code fastmath does not own pays it. Here it is a few pointer tests.
 *
 * ``hot(state)`` returns a builtin function over a list that the Python side keeps up to
 * date (Ufunc._small, Ufunc._ref): the reference, the size below which ``auto`` calls
 * it, the types of one element (empty while one element is not below that size), the
 * Python fast path, the number of operands, numpy.ndarray, the backend context variable,
 * the selection state, "auto" and the traceback trimmer (and, further on, the sizes by
 * dtype below which ``auto`` calls the reference too, Ufunc._smalls, and the function
 * that acts on FP flags as NumPy's error state says, _fpe.report for this function).
 * Calls with no option, and calls whose one option is an output array (out=, as NumPy
 * takes it: ``np.exp(x, out=x)`` is common in numerical code, and the Python path's
 * parse of it cost 5 us, more than NumPy's whole call on 10^3 elements), are answered
 * here. Any call it does not answer, and every call while a profiler or tracer watches
 * this thread (so that they see fastmath's frames), goes to the Python fast path, which
 * decides exactly as before.
 *
 * An error from the Python path leaves with fastmath's frames taken out of its traceback
 * (frontends/_frames.py): having no frame of its own, this function is where that is
 * complete, and the error names the caller's line as NumPy's own would.
 *
 * The extension fastmath.frontends._hot (setup.py); without it the Python path serves.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

enum { REF, SMALL, ONES, FALLBACK, NIN, NDARRAY, SCOPED, STATE, AUTO, TRIM,
       LEAN, NUMPY, SERIAL, UNARY, SMALLS, AUTOLEAN, REPORT,
       FORCED, VML, NEED, ERRSTATE, DERIVE, NSTATE };

/* LEAN's entries: (dtype, loops, pace, smallest size on the runtime, largest size, the
 * result's dtype, the kernel); AUTOLEAN's: the same for a size class ``auto`` learned to
 * run on the numpy backend (its first and past-last size), and the learned choice
 * (_learn.Settled: its ``left`` counts the calls down to the next revisit); loops None:
 * a class learned for the reference, called as it is */
enum { L_DTYPE, L_LOOPS, L_PACE, L_MIN, L_MAX, L_OUT, L_KERNEL, L_SETTLED, L_N };
/* FORCED's entries: (dtype, the runtime's VML call's settings, the backend's name, 0,
 * largest size, the result's dtype, the kernel): a backend selected by name whose kernel
 * runs VML's or SLEEF's entry point on the runtime (backends/_vml.py's vml_entry);
 * AUTOLEAN's for a size class auto learned to run on such a backend: the same, with the
 * class's first and past-last size and the learned choice (a backend's name where the
 * numpy backend's entries hold their pacing record's number) */
enum { F_SPEC = L_LOOPS, F_BACKEND = L_PACE };

static PyObject *default_name;  /* "default": the selection state's attribute */
/* Where that attribute, a slot of the state's class, lies in the object (and that class):
 * read there, it costs a load, where the attribute lookup cost 25-30 ns a call, a tenth of
 * what a fastmath ufunc adds to NumPy's call on ten elements; 0: looked up by name */
static Py_ssize_t default_offset;
static PyTypeObject *default_type;
static PyObject *left_name;     /* "left": a learned choice's calls before its revisit */
static PyObject *zero;

/* The backend selected now (a new reference), or NULL (no error set). */
static PyObject *
selected(PyObject *const *s)
{
    PyObject *scoped = NULL, *name;
    if (PyContextVar_Get(s[SCOPED], NULL, &scoped) < 0) {
        PyErr_Clear();
        return NULL;
    }
    if (scoped != NULL && scoped != Py_None) {
        return scoped;
    }
    Py_XDECREF(scoped);
    if (default_offset > 0 && Py_TYPE(s[STATE]) == default_type) {
        name = *(PyObject **)((char *)s[STATE] + default_offset);
        if (name != NULL) {
            return Py_NewRef(name);
        }
    }
    name = PyObject_GetAttr(s[STATE], default_name);
    if (name == NULL) {
        PyErr_Clear();
    }
    return name;
}

static int
same_name(PyObject *name, PyObject *want)
{
    int r = name != NULL && PyObject_RichCompareBool(name, want, Py_EQ) > 0;
    PyErr_Clear();
    return r;
}

/* x as an array, where it is one and `list` (of calls this file makes itself) is not empty */
static PyArrayObject *
listed_array(PyObject *const *s, PyObject *list, PyObject *x)
{
    if (PyList_GET_SIZE(list) == 0 || Py_TYPE(x) != (PyTypeObject *)s[NDARRAY]) {
        return NULL;
    }
    return (PyArrayObject *)x;
}

/* x as an array, where `list` is not empty and x is one of one or more dimensions, aligned
 * and C-contiguous, of the shape of `out` where the call gave one */
static PyArrayObject *
contiguous_listed(PyObject *const *s, PyObject *list, PyObject *x, PyObject *out)
{
    int need = NPY_ARRAY_ALIGNED | NPY_ARRAY_C_CONTIGUOUS;
    PyArrayObject *a = listed_array(s, list, x);
    if (a == NULL || PyArray_NDIM(a) == 0 || (PyArray_FLAGS(a) & need) != need
            || (out != NULL && !PyArray_SAMESHAPE(a, (PyArrayObject *)out))) {
        return NULL;
    }
    return a;
}

static npy_intp
elements(PyArrayObject *a)
{
    npy_intp size = 1;
    for (int d = 0; d < PyArray_NDIM(a); d++) {
        size *= PyArray_DIMS(a)[d];
    }
    return size;
}

/* Whether the backend selected now is `want` ("numpy", "auto"). */
static int
selected_is(PyObject *const *s, PyObject *want)
{
    PyObject *name = selected(s);
    int r = same_name(name, want);
    Py_XDECREF(name);
    return r;
}

/* A new array shaped and ordered like x, as NumPy's call makes its result, of dtype descr. */
static PyObject *
new_like(PyObject *x, PyObject *descr)
{
    Py_INCREF(descr);
    return PyArray_NewLikeArray((PyArrayObject *)x, NPY_KEEPORDER, (PyArray_Descr *)descr, 0);
}

static PyObject *run_unary(PyObject *const *s, PyObject *x, PyObject *e, PyObject *out);
static int vml_ready(PyObject *const *s, PyObject *x, PyObject *e, PyObject *out);
static PyObject *run_vml(PyObject *const *s, PyObject *x, PyObject *e, PyObject *out, int look);

/* Whether the call runs in one thread now (the one-thread context variable; 1 where it
 * cannot be read): then the Python path takes it. */
static int
serial_now(PyObject *const *s)
{
    PyObject *serial = NULL;
    if (PyContextVar_Get(s[SERIAL], NULL, &serial) < 0) {
        PyErr_Clear();
        return 1;
    }
    int alone = serial != NULL && PyObject_IsTrue(serial) == 1;
    Py_XDECREF(serial);
    return alone;
}

/* Under the numpy backend, one contiguous array in a dtype its loop takes as it is (into
 * `out`, where the call gave one: see run_unary): the numpy backend's own call, made
 * here. NumPy's call below the size that splits (NULL with *ref set: the caller makes it,
 * with the call's own arguments); from it, the runtime's (_runtime.unary). NULL with no
 * error set: the Python path takes the call. */
static PyObject *
lean_numpy(PyObject *const *s, PyObject *x, PyObject *out, int *ref)
{
    PyObject *lean = s[LEAN];
    PyArrayObject *a = listed_array(s, lean, x);
    if (a == NULL || (out != NULL && !PyArray_SAMESHAPE(a, (PyArrayObject *)out))) {
        return NULL;
    }
    Py_ssize_t k, n = PyList_GET_SIZE(lean);
    PyObject *e = NULL;
    for (k = 0; k < n; k++) {
        e = PyList_GET_ITEM(lean, k);
        if (PyTuple_GET_ITEM(e, L_DTYPE) == (PyObject *)PyArray_DESCR(a)) {
            break;
        }
    }
    int need = NPY_ARRAY_ALIGNED | NPY_ARRAY_C_CONTIGUOUS;
    int needf = NPY_ARRAY_ALIGNED | NPY_ARRAY_F_CONTIGUOUS;
    if (k == n || PyArray_NDIM(a) == 0 || ((PyArray_FLAGS(a) & need) != need
                                          && (PyArray_FLAGS(a) & needf) != needf)) {
        return NULL;
    }
    npy_intp size = elements(a);
    Py_ssize_t lo = PyLong_AsSsize_t(PyTuple_GET_ITEM(e, L_MIN));
    Py_ssize_t hi = PyLong_AsSsize_t(PyTuple_GET_ITEM(e, L_MAX));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (size == 0 || size >= hi) {
        return NULL;
    }
    if (!selected_is(s, s[NUMPY])) {
        return NULL;
    }
    if (size < lo) {
        *ref = 1; /* NumPy's call: its own FP reports */
        return NULL;
    }
    if ((PyArray_FLAGS(a) & need) != need) { /* the runtime's loops run C order only */
        return NULL;
    }
    return run_unary(s, x, e, out);
}

/* Whether `out` (a given out=, of x's shape) is where NumPy's call would write entry e's
 * result as it is: of its dtype, C-contiguous, aligned and writeable. */
static int
fits(PyObject *e, PyObject *out)
{
    int need = NPY_ARRAY_ALIGNED | NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE;
    return (PyObject *)PyArray_DESCR((PyArrayObject *)out) == PyTuple_GET_ITEM(e, L_OUT)
           && (PyArray_FLAGS((PyArrayObject *)out) & need) == need;
}

/* The runtime's call of entry e's loops on x, into `out` (out= given) or a new result,
 * and its FP flags acted on as NumPy's error state says (REPORT: _fpe.report for this
 * function; it may warn or raise, as NumPy's call would, out= written). NULL with no
 * error set where the Python path is to take the call, nothing written (one thread asked
 * for; an out= of another dtype, shape or layout, or overlapping x other than exactly;
 * a layout the runtime does not take). */
static PyObject *
run_unary(PyObject *const *s, PyObject *x, PyObject *e, PyObject *out)
{
    if (serial_now(s) || s[UNARY] == Py_None || !PyCallable_Check(s[REPORT])
            || (out != NULL && !fits(e, out))) {
        return NULL;
    }
    if (out != NULL) {
        Py_INCREF(out);
    }
    else if ((out = new_like(x, PyTuple_GET_ITEM(e, L_OUT))) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(e); /* its loops are in use while the GIL is released */
    PyObject *args[7] = {PyTuple_GET_ITEM(e, L_LOOPS), x, out, PyTuple_GET_ITEM(e, L_PACE),
                         zero, zero, zero};
    PyObject *flags = PyObject_Vectorcall(s[UNARY], args, 7, NULL);
    Py_DECREF(e);
    if (flags == NULL || flags == Py_None) { /* an error, raised to the caller; or None:
                                               * not taken, nothing written (the Python
                                               * path's) */
        Py_XDECREF(flags);
        Py_DECREF(out);
        return NULL;
    }
    int clean = PyLong_CheckExact(flags) && PyLong_AsLong(flags) == 0;
    if (!clean) {
        PyObject *r = PyObject_CallOneArg(s[REPORT], flags);
        if (r == NULL) {
            Py_DECREF(flags);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_DECREF(flags);
    return out;
}

/* Under ``auto``, one C-contiguous array of a dtype and size class that ``auto`` learned to
 * run on the numpy backend (into `out`, where the call gave one of its shape): that
 * backend's runtime call, made here, while the learned choice has calls left before its
 * revisit (the revisit's call takes the Python path, which learns again); of a class
 * learned for the reference, NULL with *ref set: the caller makes the reference's own
 * call. NULL with no error set and *ref not: the Python path takes the call. */
static PyObject *
lean_auto(PyObject *const *s, PyObject *x, PyObject *out, int *ref)
{
    PyArrayObject *a = contiguous_listed(s, s[AUTOLEAN], x, out);
    if (a == NULL) {
        return NULL;
    }
    PyObject *lean = s[AUTOLEAN];
    Py_ssize_t k, n = PyList_GET_SIZE(lean);
    npy_intp size = elements(a);
    PyObject *e = NULL;
    for (k = 0; k < n; k++) {
        PyObject *t = PyList_GET_ITEM(lean, k);
        if (PyTuple_GET_ITEM(t, L_DTYPE) != (PyObject *)PyArray_DESCR(a)) {
            continue;
        }
        Py_ssize_t lo = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, L_MIN));
        Py_ssize_t hi = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, L_MAX));
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return NULL;
        }
        if (lo <= size && size < hi) {
            e = t;
            break;
        }
    }
    if (e == NULL || (out != NULL && PyTuple_GET_ITEM(e, L_LOOPS) != Py_None && !fits(e, out))) {
        return NULL; /* (an out= the runtime does not take: the learned choice's calls
                      * left are counted by the Python path's) */
    }
    int vml = PyUnicode_Check(PyTuple_GET_ITEM(e, F_BACKEND)); /* a VML backend learned */
    int look = vml ? vml_ready(s, x, e, out) : 0;
    if (look < 0) {
        return NULL;
    }
    if (!selected_is(s, s[AUTO])) {
        return NULL;
    }
    PyObject *settled = PyTuple_GET_ITEM(e, L_SETTLED);
    PyObject *left = PyObject_GetAttr(settled, left_name);
    long calls = left != NULL ? PyLong_AsLong(left) : -1;
    Py_XDECREF(left);
    if (calls <= 1) { /* (or unreadable): the revisit is the Python path's */
        PyErr_Clear();
        return NULL;
    }
    PyObject *fewer = PyLong_FromLong(calls - 1);
    if (fewer == NULL || PyObject_SetAttr(settled, left_name, fewer) < 0) {
        Py_XDECREF(fewer);
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(fewer);
    if (PyTuple_GET_ITEM(e, L_LOOPS) == Py_None) {
        *ref = 1; /* NumPy's call: its own FP reports */
        return NULL;
    }
    return vml ? run_vml(s, x, e, out, look) : run_unary(s, x, e, out);
}

/* What NumPy's error state asks of a kernel whose FP flags are not its own (NEED:
 * dispatch/_fpe.need for a function that can raise flags; None for one that raises
 * none): 0 nothing, 1 a look at the output for an inf or a NaN, 2 more (underflow is
 * watched), -1 not known. Read again only when NumPy's error state object (ERRSTATE, its
 * context variable) is another than last time: the object is held, so its identity is
 * not reused while it is compared; what is kept is the same for every function that can
 * raise flags. */
static PyObject *need_state;
static int need_cached = -1;

static int
fp_need(PyObject *const *s)
{
    if (s[NEED] == Py_None) {
        return 0;
    }
    PyObject *state = NULL;
    if (!PyContextVar_CheckExact(s[ERRSTATE]) || PyContextVar_Get(s[ERRSTATE], NULL, &state) < 0
            || state == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (state == need_state && need_cached >= 0) {
        Py_DECREF(state);
        return need_cached;
    }
    PyObject *r = PyObject_CallNoArgs(s[NEED]);
    long need = r != NULL ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    if (need < 0 || need > 2) {
        PyErr_Clear();
        Py_DECREF(state);
        return -1;
    }
    Py_XSETREF(need_state, state);
    need_cached = (int)need;
    return need_cached;
}

/* Whether the runtime's VML call of entry e (FORCED's layout; AUTOLEAN's too, with the
 * learned choice after it) may be made here on x into `out` (NULL: a new result): 1 with
 * NumPy's flags watched (the output is looked at for an inf or a NaN), 0 without, -1
 * where the Python path is to take the call (an out= of another dtype or layout; one
 * thread asked for; underflow watched; in place with flags watched: the Python path keeps
 * the input to derive them). An out= overlapping x other than exactly the runtime's call
 * declines, nothing written (run_vml: the Python path's, which copies). */
static int
vml_ready(PyObject *const *s, PyObject *x, PyObject *e, PyObject *out)
{
    if (s[VML] == Py_None || (out != NULL && !fits(e, out)) || serial_now(s)) {
        return -1;
    }
    int look = fp_need(s);
    return look < 0 || look > 1 || (look && out == x) ? -1 : look;
}

/* The runtime's VML call of entry e (vml_ready said `look`), into `out` or a new result,
 * and NumPy's FP flags found as the kernel finds them (an inf or a NaN seen: DERIVE, which
 * reports what NumPy would have raised). NULL with no error set where the runtime did not
 * take it (nothing written: the Python path's). */
static PyObject *
run_vml(PyObject *const *s, PyObject *x, PyObject *e, PyObject *out, int look)
{
    if (out != NULL) {
        Py_INCREF(out);
    }
    else if ((out = new_like(x, PyTuple_GET_ITEM(e, L_OUT))) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(e); /* its kernel holds the pacing record in use */
    PyObject *args[4] = {PyTuple_GET_ITEM(e, F_SPEC), x, out, look ? Py_True : Py_False};
    PyObject *seen = PyObject_Vectorcall(s[VML], args, 4, NULL);
    Py_DECREF(e);
    if (seen == NULL || seen == Py_None) { /* an error; or None: not taken, nothing written */
        Py_XDECREF(seen);
        Py_DECREF(out);
        return NULL;
    }
    int derive = look && seen == Py_True;
    Py_DECREF(seen);
    if (derive) {
        PyObject *r = PyObject_CallFunctionObjArgs(s[DERIVE], x, out, NULL);
        if (r == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(r);
    }
    return out;
}

/* Under a backend selected by name (mkl, torch-cpu), one C-contiguous array of a dtype its
 * kernel runs on the runtime's VML call (into `out`, where the call gave one): that call,
 * made here (run_vml). The Python path's layers around the same call (the kernel's
 * checks, the error state's reading, the chain, the context variables) cost 4-5 us, a
 * tenth of a call of exp on 10^5 float32 elements. NULL with no error set where the
 * Python path is to take the call, nothing written. */
static PyObject *
lean_forced(PyObject *const *s, PyObject *x, PyObject *out)
{
    PyArrayObject *a = contiguous_listed(s, s[FORCED], x, out);
    if (a == NULL) {
        return NULL;
    }
    PyObject *forced = s[FORCED], *e = NULL, *name = selected(s);
    for (Py_ssize_t k = 0; name != NULL && k < PyList_GET_SIZE(forced); k++) {
        PyObject *t = PyList_GET_ITEM(forced, k);
        if (PyTuple_GET_ITEM(t, L_DTYPE) == (PyObject *)PyArray_DESCR(a)
                && same_name(name, PyTuple_GET_ITEM(t, F_BACKEND))) {
            e = t;
            break;
        }
    }
    Py_XDECREF(name);
    if (e == NULL) {
        return NULL;
    }
    npy_intp size = elements(a);
    Py_ssize_t hi = PyLong_AsSsize_t(PyTuple_GET_ITEM(e, L_MAX));
    if (hi < 0) {
        PyErr_Clear();
        return NULL;
    }
    int look = size == 0 || size >= hi ? -1 : vml_ready(s, x, e, out);
    return look < 0 ? NULL : run_vml(s, x, e, out, look);
}

static int
small_operands(PyObject *const *s, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t small = PyLong_AsSsize_t(s[SMALL]);
    if (small == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTypeObject *type = Py_TYPE(args[i]);
        if (type == (PyTypeObject *)s[NDARRAY]) {
            PyArrayObject *a = (PyArrayObject *)args[i];
            npy_intp size = elements(a);
            if (size >= small) {
                /* SMALLS: {dtype: size}, where auto learned the reference further up for
                 * that dtype than for another */
                PyObject *own = PyDict_Check(s[SMALLS])
                    ? PyDict_GetItemWithError(s[SMALLS], (PyObject *)PyArray_DESCR(a)) : NULL;
                Py_ssize_t limit = own != NULL ? PyLong_AsSsize_t(own) : -1;
                if (limit == -1) {
                    PyErr_Clear();
                    return 0;
                }
                if (size >= limit) {
                    return 0;
                }
            }
        }
        else {
            int r = PyDict_Contains(s[ONES], (PyObject *)type);
            if (r <= 0) {
                if (r < 0) {
                    PyErr_Clear();
                }
                return 0;
            }
        }
    }
    return 1;
}

/* The pending error's traceback without fastmath's frames: trimmer(exc) -> traceback.
 * If the trimmer fails, the error stays as it was. */
static void
trim(PyObject *trimmer)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL && PyException_SetTraceback(value, tb) == 0) {
        PyObject *res = PyObject_CallOneArg(trimmer, value);
        if (res == NULL) {
            PyErr_Clear();
        }
        else if (res == Py_None || PyTraceBack_Check(res)) {
            Py_XDECREF(tb);
            tb = res == Py_None ? NULL : res;
            if (tb == NULL) {
                Py_DECREF(res);
            }
        }
        else {
            Py_DECREF(res);
        }
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

/* The one array a call writes into, given as NumPy takes it (out=o, out=(o,), or o after
 * the operands) and with no other option; NULL for any other call. Borrowed. */
static PyObject *
given_out(PyObject *const *s, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
          Py_ssize_t nin)
{
    PyObject *o;
    if (kwnames == NULL) {
        if (nargs != nin + 1) {
            return NULL;
        }
        o = args[nin];
    }
    else {
        if (nargs != nin || PyTuple_GET_SIZE(kwnames) != 1
                || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out") != 0) {
            return NULL;
        }
        o = args[nin];
        if (PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 1) {
            o = PyTuple_GET_ITEM(o, 0);
        }
    }
    return Py_TYPE(o) == (PyTypeObject *)s[NDARRAY] ? o : NULL;
}

static PyObject *
hot_call(PyObject *state, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *const *s = ((PyListObject *)state)->ob_item;
    PyThreadState *ts = PyThreadState_Get();
    PyObject *fn;
    if (PyList_GET_SIZE(state) != NSTATE) {
        PyErr_SetString(PyExc_SystemError, "a fastmath ufunc's state was resized");
        return NULL;
    }
    Py_ssize_t nin = PyLong_AsSsize_t(s[NIN]);
    int untraced = ts->c_profilefunc == NULL && ts->c_tracefunc == NULL;
    int plain = untraced && kwnames == NULL && nargs == nin;
    PyObject *out = untraced && !plain ? given_out(s, args, nargs, kwnames, nin) : NULL;
    PyObject *name = NULL;
    int ref = 0;
    if ((plain || out != NULL) && PyDict_Check(s[ONES]) && small_operands(s, args, nin)
            && (out == NULL || small_operands(s, &out, 1))
            && same_name(name = selected(s), s[AUTO])) {
        fn = s[REF];
    }
    else {
        if ((plain || out != NULL) && nin == 1) {
            PyObject *r = lean_numpy(s, args[0], out, &ref);
            if (r == NULL && !ref && !PyErr_Occurred()) {
                r = lean_auto(s, args[0], out, &ref);
            }
            if (r == NULL && !ref && !PyErr_Occurred()) {
                r = lean_forced(s, args[0], out);
            }
            if (r != NULL || PyErr_Occurred()) {
                if (r == NULL) { /* (errstate's raise, from _fpe.report) */
                    trim(s[TRIM]);
                }
                Py_XDECREF(name);
                return r;
            }
        }
        fn = ref ? s[REF] : s[FALLBACK];
    }
    Py_XDECREF(name);
    /* held for the call: the Python side may replace the list's item meanwhile (the
     * first call of a SciPy ufunc loads it and stores the loaded one) */
    Py_INCREF(fn);
    PyObject *r = PyObject_Vectorcall(fn, args, nargs, kwnames);
    if (r == NULL && fn != s[REF]) {
        trim(s[TRIM]);
    }
    Py_DECREF(fn);
    return r;
}

static PyMethodDef hot_def = {
    "fast", (PyCFunction)(void (*)(void))hot_call, METH_FASTCALL | METH_KEYWORDS,
    "A fastmath ufunc's fast path (fastmath/frontends/_hot.c).",
};

static PyObject *
hot(PyObject *module, PyObject *state)
{
    if (!PyList_CheckExact(state) || PyList_GET_SIZE(state) != NSTATE) {
        PyErr_Format(PyExc_TypeError, "hot(state): state must be a list of %d items", NSTATE);
        return NULL;
    }
    if (default_name == NULL && (default_name = PyUnicode_InternFromString("default")) == NULL) {
        return NULL;
    }
    if (left_name == NULL && (left_name = PyUnicode_InternFromString("left")) == NULL) {
        return NULL;
    }
    if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL) {
        return NULL;
    }
    /* the items are read without checks on every call: check their types once here */
    PyObject *const *s = ((PyListObject *)state)->ob_item;
    if (!PyLong_Check(s[SMALL]) || !PyDict_Check(s[ONES]) || !PyLong_Check(s[NIN])
            || !PyType_Check(s[NDARRAY]) || !PyContextVar_CheckExact(s[SCOPED])
            || !PyList_CheckExact(s[LEAN]) || !PyContextVar_CheckExact(s[SERIAL])
            || !PyList_CheckExact(s[FORCED])) {
        PyErr_SetString(PyExc_TypeError, "hot(state): an item of state has the wrong type");
        return NULL;
    }
    if (default_type == NULL) { /* the state's slot, where its class has one */
        PyTypeObject *t = Py_TYPE(s[STATE]);
        PyObject *d = PyObject_GetAttr((PyObject *)t, default_name);
        if (d == NULL) {
            PyErr_Clear();
        }
        else if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && m->offset > 0) {
                default_offset = m->offset;
                default_type = t;
                Py_INCREF(t);
            }
        }
        Py_XDECREF(d);
    }
    return PyCFunction_New(&hot_def, state);
}

/* vectorcalled(cls): whether calls of cls's instances now enter the call slot of its
 * nearest base with a vectorcall (functools.partial's) by vectorcall. Python 3.12 lets a
 * class that does not define __call__ inherit its base's vectorcall; 3.10 and 3.11 keep
 * the slot's offset but not the flag that says it is there, so every call of a fastmath
 * ufunc paid partial's tp_call: an argument tuple made and unpacked again, 60 ns, a
 * quarter of NumPy's whole call on ten elements. The flag is set here where the class
 * calls exactly as that base does. */
static PyObject *
vectorcalled(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "vectorcalled(cls): cls must be a class");
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)cls, *b = t->tp_base;
    while (b != NULL && !(b->tp_flags & Py_TPFLAGS_HAVE_VECTORCALL)) {
        b = b->tp_base;
    }
    if (t->tp_flags & Py_TPFLAGS_HAVE_VECTORCALL) {
        Py_RETURN_TRUE;
    }
    if (b == NULL || t->tp_call != b->tp_call
            || t->tp_vectorcall_offset != b->tp_vectorcall_offset || t->tp_vectorcall_offset <= 0) {
        Py_RETURN_FALSE; /* its own __call__, or no vectorcall to take */
    }
    t->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    PyType_Modified(t);
    Py_RETURN_TRUE;
}

/* functools.partial's own vectorcall, saved where direct() first replaces it */
static vectorcallfunc partial_vectorcall;

/* The call of an instance that direct() prepared: its fast path at once, without
 * functools.partial's vectorcall in between (which looks its function up, checks its
 * stored arguments and calls it: 30-45 ns, a sixth of NumPy's call on ten elements).
 * Anything else, partial's own call. The fields read are those direct() checked. */
static PyObject *
direct_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject **f = (PyObject **)((char *)self + sizeof(PyObject)); /* func, args, keywords */
    PyObject *fn = f[0];
    if (PyTuple_GET_SIZE(f[1]) == 0 && PyDict_GET_SIZE(f[2]) == 0 && PyCFunction_Check(fn)
            && ((PyCFunctionObject *)fn)->m_ml == &hot_def) {
        return hot_call(PyCFunction_GET_SELF(fn), args, PyVectorcall_NARGS(nargsf), kwnames);
    }
    return partial_vectorcall(self, args, nargsf, kwnames);
}

/* direct(obj): whether calls of obj (a functools.partial, its class taking partial's
 * vectorcall: vectorcalled()) now enter direct_call. Only where obj's fields are where
 * direct_call reads them (partial's func, args and keywords, first after the object's
 * header, checked against its attributes: a Python whose partial is laid out otherwise
 * keeps partial's call) and its vectorcall is partial's. partial's __setstate__ puts its
 * own back: direct() again after it. */
static PyObject *
direct(PyObject *module, PyObject *obj)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (!(t->tp_flags & Py_TPFLAGS_HAVE_VECTORCALL) || t->tp_vectorcall_offset <= 0) {
        Py_RETURN_FALSE;
    }
    vectorcallfunc *slot = (vectorcallfunc *)((char *)obj + t->tp_vectorcall_offset);
    PyObject *fn = PyObject_GetAttrString(obj, "func");
    PyObject *args = PyObject_GetAttrString(obj, "args");
    PyObject *kw = PyObject_GetAttrString(obj, "keywords");
    PyObject **f = (PyObject **)((char *)obj + sizeof(PyObject));
    int ok = fn != NULL && args != NULL && kw != NULL && PyTuple_CheckExact(args)
             && PyDict_CheckExact(kw)
             && (size_t)t->tp_basicsize >= sizeof(PyObject) + 3 * sizeof(PyObject *)
             && f[0] == fn && f[1] == args && f[2] == kw && *slot != NULL
             && (*slot == direct_call || partial_vectorcall == NULL
                 || *slot == partial_vectorcall);
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    PyErr_Clear();
    if (!ok) {
        Py_RETURN_FALSE;
    }
    if (*slot != direct_call) {
        partial_vectorcall = *slot;
        *slot = direct_call;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"direct", direct, METH_O,
     "direct(obj) -> whether calls of obj now enter its fast path without partial's call"},
    {"hot", hot, METH_O, "hot(state) -> a fastmath ufunc's fast path over the list state"},
    {"vectorcalled", vectorcalled, METH_O,
     "vectorcalled(cls) -> whether calls of cls's instances take its base's vectorcall"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "fastmath.frontends._hot",
    "The ufuncs' fast path in C (see fastmath/frontends/_hot.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__hot(void)
{
    import_array();
    return PyModule_Create(&module);
}
