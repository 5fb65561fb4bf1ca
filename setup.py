"""Build steps pyproject.toml cannot declare: the optional C extensions, each in the layer it
serves (the native runtime fastmath.dispatch._runtime and fastmath.foreach's list runner
fastmath.dispatch._lists, the ufuncs' fast path
fastmath.frontends._hot, the loop mode's fastmath.integrations._loops, logsumexp's
fastmath.backends._lse_kernel), and the FASTMATH_PATCH start-up hook.

The extensions are optional: without a C compiler (or NumPy's headers) the package installs
all the same, ``fastmath.patch(mode="loops")`` says why the mode is unavailable, and
the rest takes its Python path.
``fastmath-startup.pth`` must sit in site-packages itself (Python's site module reads .pth
files only there), for ordinary and for editable installs alike.
"""
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HOOK = "fastmath-startup.pth"


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
    """The hook at the top of the wheel, next to the package: site-packages once installed."""

    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(HOOK, os.path.join(self.build_lib, HOOK))

    def get_outputs(self, include_bytecode=True):
        extra = [] if self.editable_mode else [os.path.join(self.build_lib, HOOK)]
        return super().get_outputs(include_bytecode) + extra


class _BuildExt(build_ext):
    """Put a rebuilt extension in place by rename, never by rewriting the file: a running
    process that has the old one loaded (editable installs build into the checkout) keeps
    its copy intact instead of crashing."""

    def copy_file(self, infile, outfile, *args, **kwargs):
        if not str(outfile).endswith((".so", ".pyd")) or self.dry_run:
            return super().copy_file(infile, outfile, *args, **kwargs)
        if os.path.isdir(outfile):
            outfile = os.path.join(outfile, os.path.basename(infile))
        tmp = f"{outfile}.{os.getpid()}.tmp"
        shutil.copyfile(infile, tmp)
        shutil.copymode(infile, tmp)
        os.replace(tmp, outfile)
        return outfile, True


cmdclass = {"build_py": _BuildPy, "build_ext": _BuildExt}
try:
    from setuptools.command.editable_wheel import editable_wheel

    class _EditableWheel(editable_wheel):
        """An editable wheel ships the hook too (build_py's outputs are not part of it)."""

        def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
            result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
            shutil.copy(HOOK, os.path.join(unpacked_wheel, HOOK))
            return result

    cmdclass["editable_wheel"] = _EditableWheel
except ImportError:  # setuptools without PEP 660 editable wheels
    pass

# the runtime's C interface and the NumPy loop helpers the extensions on it share
_RUNTIME_HEADERS = ["fastmath/dispatch/_runtime.h", "fastmath/dispatch/_npy_loop.h"]

setup(
    ext_modules=[  # the one thread pool and pacing policy (fastmath/dispatch/_runtime.c), first:
                 # _lists, _loops and _lse_kernel import its C interface
                 _Extension("fastmath.dispatch._runtime", ["fastmath/dispatch/_runtime.c"],
                            depends=_RUNTIME_HEADERS, optional=True,
                            extra_compile_args=["-O3", "-std=c11"]),
                 # fastmath.foreach's list runner on the runtime (fastmath/dispatch/_lists.c)
                 _Extension("fastmath.dispatch._lists", ["fastmath/dispatch/_lists.c"],
                            depends=_RUNTIME_HEADERS, optional=True,
                            extra_compile_args=["-O2", "-std=c11"]),
                 # the loop mode's trampolines (fastmath/integrations/_loops.c)
                 _Extension("fastmath.integrations._loops", ["fastmath/integrations/_loops.c"],
                            depends=_RUNTIME_HEADERS, optional=True,
                            extra_compile_args=["-O2", "-std=c11"]),
                 # the ufuncs' fast path in C (fastmath/frontends/_ufunc.py uses it when built)
                 _Extension("fastmath.frontends._hot", ["fastmath/frontends/_hot.c"],
                            optional=True, extra_compile_args=["-O2", "-std=c11"]),
                 # logsumexp of small arrays in one call, of large ones by blocks on the
                 # runtime (fastmath/backends/_lse_kernel.c)
                 _Extension("fastmath.backends._lse_kernel", ["fastmath/backends/_lse_kernel.c"],
                            depends=_RUNTIME_HEADERS, optional=True,
                            extra_compile_args=["-O3", "-std=c11"])],
    cmdclass=cmdclass,
)
