"""fastmath.accelerate: each form, and the Python features a decorated function must keep."""
import asyncio
import functools
import importlib
import inspect
import sys
import textwrap
import threading

import numpy
import pytest
import scipy.special

import fastmath

from helpers import assert_same
from helpers import fastmath_calls

# A user's module, with every import style the decorator must see through.
USER_MODULE = '''
import numpy
import numpy as np
import scipy
import scipy.special
import scipy.special as sc
from numpy import exp, log1p, floor
from scipy import special
from scipy.special import erf, logsumexp

SCALE = 1.0

def styles(x):
    return [np.exp(x), numpy.log(x), exp(x), log1p(x), floor(x), scipy.special.erf(x),
            sc.erf(x), special.erf(x), erf(x), logsumexp(x), np.expm1(x) * SCALE]

def scaled(x):
    return np.exp(x) * SCALE

def repeat_exp(n, x):
    return x if n == 0 else repeat_exp(n - 1, np.exp(x) / 3)

def nested(x):
    def inner(y):
        return np.exp(y)
    lam = lambda y: np.log1p(y)
    return [inner(x), lam(x)] + [erf(v) for v in (x,)]

def gen(x):
    for k in range(3):
        yield np.exp(x * k)

def with_defaults(x, k=2.0, *, shift=0.0):
    """Docstring kept."""
    return np.exp(x) * k + shift

counter = 0

def writes_global(x):
    global counter
    counter += 1
    return np.exp(x)
'''

@pytest.fixture(scope="module")
def user(tmp_path_factory):
    d = tmp_path_factory.mktemp("usermod")
    (d / "fm_user_module.py").write_text(USER_MODULE)
    sys.path.insert(0, str(d))
    try:
        yield importlib.import_module("fm_user_module")
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("fm_user_module", None)


X = numpy.linspace(0.5, 2.0, 7)


def same_list(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same(g, e)


def test_every_import_style_is_rerouted(user):
    before = dict(vars(user))
    fast = fastmath.accelerate(user.styles)
    with fastmath.backend("numpy"):  # bitwise equal to numpy, so results compare exactly
        got, calls = fastmath_calls(fast, X)
    assert calls == ["exp", "log", "exp", "log1p", "erf", "erf", "erf", "erf", "logsumexp",
                     "expm1"]
    same_list(got, user.styles(X))
    # the module and the original function are untouched
    assert dict(vars(user)) == before
    assert fastmath_calls(user.styles, X)[1] == []


def test_later_changes_to_the_module_are_seen(user):
    fast = fastmath.accelerate(user.scaled)
    try:
        user.SCALE = 3.0
        assert_same(fast(X), numpy.exp(X) * 3.0)
        user.np = None  # rebinding a module global is seen too
        with pytest.raises(AttributeError):
            fast(X)
    finally:
        user.SCALE = 1.0
        user.np = numpy


def test_recursion_stays_accelerated(user):
    # the module's name still refers to the original; the recursive calls still go fast
    fast = fastmath.accelerate(user.repeat_exp)
    got, calls = fastmath_calls(fast, 4, X)
    assert calls == ["exp"] * 4
    assert_same(got, user.repeat_exp(4, X), ulps=8)  # four chained exps, each within 2 ULP


def test_nested_functions_lambdas_and_comprehensions(user):
    got, calls = fastmath_calls(fastmath.accelerate(user.nested), X)
    assert calls == ["exp", "log1p", "erf"]
    same_list(got, user.nested(X))


def test_generators(user):
    fast = fastmath.accelerate(user.gen)
    assert inspect.isgeneratorfunction(fast)
    got, calls = fastmath_calls(lambda: list(fast(X)))
    assert calls == ["exp"] * 3
    same_list(got, list(user.gen(X)))

    @fastmath.accelerate(backend="numpy")
    def scoped():
        for _ in range(2):
            yield fastmath.get_backend()

    it = scoped()
    assert next(it) == "numpy"
    assert fastmath.get_backend() == "auto"  # not leaked while the generator is suspended
    assert next(it) == "numpy"

    log = []

    @fastmath.accelerate(backend="numpy")
    def echo():
        try:
            while True:
                try:
                    got = yield fastmath.get_backend()
                    log.append(got)
                except KeyError as e:
                    log.append(("caught", e.args[0], fastmath.get_backend()))
        finally:
            log.append(("closed", fastmath.get_backend()))

    it = echo()
    assert next(it) == "numpy"
    assert it.send(5) == "numpy"
    assert it.throw(KeyError("k")) == "numpy"
    it.close()
    assert log == [5, ("caught", "k", "numpy"), ("closed", "numpy")]
    assert fastmath.get_backend() == "auto"


def test_metadata_signature_and_defaults(user):
    fast = fastmath.accelerate(user.with_defaults)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__defaults__",
                 "__kwdefaults__", "__annotations__"):
        assert getattr(fast, attr) == getattr(user.with_defaults, attr), attr
    assert fast.__wrapped__ is user.with_defaults
    assert inspect.signature(fast) == inspect.signature(user.with_defaults)
    assert_same(fast(X, shift=1.0), user.with_defaults(X, shift=1.0))

    def outer(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        wrapper.marker = "kept"
        return wrapper

    @fastmath.accelerate
    @outer
    def decorated(x):
        """Doc."""
        return numpy.exp(x)

    assert decorated.__name__ == "decorated" and decorated.__doc__ == "Doc."
    assert decorated.marker == "kept"
    assert inspect.signature(decorated) == inspect.signature(lambda x: None)


def test_closures_and_nonlocal():
    def make(k):
        total = 0

        @fastmath.accelerate
        def f(x):
            nonlocal total
            total += 1
            return numpy.exp(x) * k

        return f, lambda: total

    f, total = make(2.0)
    got, calls = fastmath_calls(f, X)
    f(X)
    assert calls == ["exp"] and total() == 2
    assert_same(got, numpy.exp(X) * 2.0)


class Base:
    def value(self, x):
        return numpy.log1p(x)


class Child(Base):
    @fastmath.accelerate
    def value(self, x):  # zero-argument super() needs the __class__ cell of the closure
        return super().value(x) + numpy.exp(x)

    @fastmath.accelerate
    @staticmethod
    def static(x):
        return numpy.exp(x)

    @staticmethod
    @fastmath.accelerate(backend="numpy")
    def static2(x):
        return numpy.exp(x)

    @fastmath.accelerate
    @classmethod
    def klass(cls, x):
        return cls.__name__, numpy.expm1(x)


def test_methods_staticmethods_classmethods():
    c = Child()
    got, calls = fastmath_calls(c.value, X)
    assert calls == ["exp"]  # Base.value is another function: not rerouted
    assert_same(got, numpy.log1p(X) + numpy.exp(X))
    assert fastmath_calls(Child.static, X)[1] == ["exp"]
    assert fastmath_calls(c.static2, X)[1] == ["exp"]
    (name, r), calls = fastmath_calls(Child.klass, X)
    assert name == "Child" and calls == ["expm1"]
    bound = fastmath.accelerate(Base().value)
    assert fastmath_calls(bound, X)[1] == ["log1p"]


def test_wrapping_numpy_and_scipy_objects():
    assert fastmath.accelerate(numpy.exp) is fastmath.exp
    assert fastmath.accelerate(numpy.log1p) is fastmath.log1p
    assert fastmath.accelerate(scipy.special.erf) is fastmath.erf
    assert fastmath.accelerate(scipy.special.logsumexp) is fastmath.logsumexp
    assert fastmath.accelerate(fastmath.exp) is fastmath.exp
    assert fastmath.accelerate(fastmath.logsumexp) is fastmath.logsumexp
    for unaccelerated in (numpy.floor, numpy.sum, scipy.special.lambertw, len):
        assert fastmath.accelerate(unaccelerated) is unaccelerated
    scoped = fastmath.accelerate(numpy.exp, backend="numpy")
    assert_same(scoped(X), numpy.exp(X))
    with pytest.raises(ValueError, match="valid choices"):
        fastmath.accelerate(numpy.exp, backend="nope")
    with pytest.raises(ValueError, match="valid choices"):
        fastmath.accelerate(backend="nope")(lambda x: x)
    with pytest.raises(TypeError, match="expects a function"):
        fastmath.accelerate(3)


def test_backend_form():
    @fastmath.accelerate(backend="numpy")
    def f(x):
        return fastmath.get_backend(), numpy.exp(x)

    (name, r), calls = fastmath_calls(f, X)
    assert name == "numpy" and calls == ["exp"]
    assert fastmath.get_backend() == "auto"

    @fastmath.accelerate()
    def g(x):
        return numpy.exp(x)

    assert fastmath_calls(g, X)[1] == ["exp"]


def test_coroutines_keep_the_backend_across_awaits():
    @fastmath.accelerate(backend="numpy")
    async def f(x):
        await asyncio.sleep(0)
        return fastmath.get_backend(), numpy.exp(x)

    name, r = asyncio.run(f(X))
    assert name == "numpy"
    assert_same(r, numpy.exp(X))


def test_other_threads_are_unaffected(user):
    fast = fastmath.accelerate(user.scaled)
    barrier = threading.Barrier(2)
    results = {}

    def run(key, fn):
        def body():
            out = []
            for _ in range(50):
                barrier.wait()
                out.append(fn(X))
            return out
        results[key] = fastmath_calls(body)

    threads = [threading.Thread(target=run, args=("fast", fast)),
               threading.Thread(target=run, args=("plain", user.scaled))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["fast"][1] == ["exp"] * 50
    assert results["plain"][1] == []


def test_refuses_functions_that_assign_globals(user):
    with pytest.raises(TypeError, match="assigns module globals"):
        fastmath.accelerate(user.writes_global)
