"""Build of the optional C extension fastmath._loops (the loop mode of fastmath.patch).

Everything else is declared in pyproject.toml. The extension is optional: without a C
compiler (or NumPy's headers) the package installs all the same, and
``fastmath.patch(mode="loops")`` says why the mode is unavailable.
"""
from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class _Extension(Extension):
    # NumPy's include directory is looked up only when the build runs, so that reading
    # this file (for metadata) needs no NumPy.
    @property
    def include_dirs(self):
        try:
            import numpy
        except ImportError:
            return []
        return [numpy.get_include()]

    @include_dirs.setter
    def include_dirs(self, value):
        pass


class _BuildPy(build_py):
    """Also ship fastmath-startup.pth, the FASTMATH_PATCH hook, at site-packages' top."""

    def run(self):
        super().run()
        self.copy_file("fastmath-startup.pth", f"{self.build_lib}/fastmath-startup.pth")

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [f"{self.build_lib}/fastmath-startup.pth"]


setup(
    ext_modules=[_Extension("fastmath._loops", ["fastmath/_loops.c"], optional=True,
                            extra_compile_args=["-O2", "-std=c11"])],
    cmdclass={"build_py": _BuildPy},
)
