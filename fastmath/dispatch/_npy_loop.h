/* NumPy's strided loops as fastmath's C extensions run them (the runtime's unary(), the
 * list runner's foreach() in _lists.c): what numpy.ufunc._get_strided_loop fills in, and
 * the FP flags a loop raised as NumPy's UFUNC_FPE_* bits. Include after NumPy's headers
 * (numpy/ufuncobject.h). */
#ifndef FASTMATH_NPY_LOOP_H
#define FASTMATH_NPY_LOOP_H

#include <fenv.h>

/* The loop NumPy itself runs for the resolved dtypes (and the given fixed strides), with
 * its context and auxdata: the capsule's contents. */
#define CALL_INFO "numpy_1.24_ufunc_call_info"
typedef struct {
    PyArrayMethod_StridedLoop *strided_loop;
    PyArrayMethod_Context *context;
    NpyAuxData *auxdata;
    npy_bool requires_pyapi;
    npy_bool no_floatingpoint_errors;
} CallInfo;

/* the flags NumPy reports (inexact is not one) */
#define ERRORS (FE_DIVBYZERO | FE_OVERFLOW | FE_UNDERFLOW | FE_INVALID)

/* feclearexcept(e) where a flag of e is raised. glibc's feclearexcept on x86-64 stores
 * and reloads the whole x87 environment (fnstenv, fldenv) whether or not a flag is set:
 * two of them, and a fesetexceptflag, were a tenth of a call of a NumPy loop on 10^4
 * float32 elements; fetestexcept reads two status words. */
static inline void clear_raised(int e)
{
    if (fetestexcept(e)) {
        feclearexcept(e);
    }
}

static inline int fpe_bits(int raised)
{
    return (raised & FE_DIVBYZERO ? UFUNC_FPE_DIVIDEBYZERO : 0)
           | (raised & FE_OVERFLOW ? UFUNC_FPE_OVERFLOW : 0)
           | (raised & FE_UNDERFLOW ? UFUNC_FPE_UNDERFLOW : 0)
           | (raised & FE_INVALID ? UFUNC_FPE_INVALID : 0);
}

/* what a loop reads contiguously and aligned */
#define NEED (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED)

#endif
