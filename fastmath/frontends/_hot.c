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
 * the selection state, "auto" and the traceback trimmer. Any call it does not answer, and
 * every call while a profiler or tracer watches this thread (so that they see fastmath's
 * frames), goes to the Python fast path, which decides exactly as before.
 *
 * An error from the Python path leaves with fastmath's frames taken out of its traceback
 * (frontends/_frames.py): having no frame of its own, this function is where that is
 * complete, and the error names the caller's line as NumPy's own would.
 *
 * Built into fastmath.integrations._loops (setup.py); without it the Python path serves.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>

enum { REF, SMALL, ONES, FALLBACK, NIN, NDARRAY, SCOPED, STATE, AUTO, TRIM, NSTATE };

static PyObject *default_name;  /* "default": the selection state's attribute */

static int
is_auto(PyObject *const *s)
{
    PyObject *scoped = NULL, *name;
    if (PyContextVar_Get(s[SCOPED], NULL, &scoped) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (scoped != NULL && scoped != Py_None) {
        name = scoped;
    }
    else {
        Py_XDECREF(scoped);
        name = PyObject_GetAttr(s[STATE], default_name);
        if (name == NULL) {
            PyErr_Clear();
            return 0;
        }
    }
    int r = PyObject_RichCompareBool(name, s[AUTO], Py_EQ);
    Py_DECREF(name);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
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
            npy_intp size = 1;
            for (int d = 0; d < PyArray_NDIM(a); d++) {
                size *= PyArray_DIMS(a)[d];
            }
            if (size >= small) {
                return 0;
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
    if (kwnames == NULL && nargs == PyLong_AsSsize_t(s[NIN]) && ts->c_profilefunc == NULL
            && ts->c_tracefunc == NULL && PyDict_Check(s[ONES])
            && small_operands(s, args, nargs) && is_auto(s)) {
        fn = s[REF];
        kwnames = NULL;
    }
    else {
        fn = s[FALLBACK];
    }
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

PyObject *
fastmath_hot(PyObject *module, PyObject *state)
{
    if (!PyList_CheckExact(state) || PyList_GET_SIZE(state) != NSTATE) {
        PyErr_Format(PyExc_TypeError, "hot(state): state must be a list of %d items", NSTATE);
        return NULL;
    }
    if (default_name == NULL && (default_name = PyUnicode_InternFromString("default")) == NULL) {
        return NULL;
    }
    /* the items are read without checks on every call: check their types once here */
    PyObject *const *s = ((PyListObject *)state)->ob_item;
    if (!PyLong_Check(s[SMALL]) || !PyDict_Check(s[ONES]) || !PyLong_Check(s[NIN])
            || !PyType_Check(s[NDARRAY]) || !PyContextVar_CheckExact(s[SCOPED])) {
        PyErr_SetString(PyExc_TypeError, "hot(state): an item of state has the wrong type");
        return NULL;
    }
    return PyCFunction_New(&hot_def, state);
}
