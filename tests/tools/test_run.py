"""``fastmath run`` behaves as ``python`` does at its edges: ``-c``, a script or module
that is not there, an error the script lets out, and a usage line that says what is
optional. Each runs the real command, since exit status and stderr are the behaviour."""
import os
from pathlib import Path
import subprocess
import sys

import pytest

ROOT = Path(__file__).resolve().parents[2]


COMMAND = Path(sys.executable).parent / "fastmath"  # the installed command, if it is


def fastmath_run(*args, cwd=None, command=(sys.executable, "-m", "fastmath")):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMATH_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([*command, "run", "--mode", "functions", *args],
                          capture_output=True, text=True, timeout=180, env=env, cwd=cwd)


def test_c_runs_code_with_pythons_argv():
    r = fastmath_run("-c", "import sys, fastmath; print(sys.argv, __name__,"
                     " fastmath.patch.active('functions'))", "a", "--mode", "-x")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['-c',", "'a',", "'--mode',", "'-x']", "__main__", "True"]


def test_c_exit_status_is_the_codes():
    assert fastmath_run("-c", "raise SystemExit(4)").returncode == 4


def test_a_missing_script_gets_pythons_message_and_status(tmp_path):
    r = fastmath_run("missing.py", "arg", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == (f"fastmath run: can't open file {str(tmp_path / 'missing.py')!r}: "
                        "[Errno 2] No such file or directory\n")


def test_a_missing_module_gets_pythons_message_and_status(tmp_path):
    r = fastmath_run("-m", "no_such_module_here", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr == "fastmath run: No module named no_such_module_here\n"


def test_an_error_in_the_script_shows_only_the_users_frames(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("def f():\n    raise ValueError('from the job')\nf()\n")
    r = fastmath_run(str(script))
    assert r.returncode == 1
    assert r.stderr.startswith(f'Traceback (most recent call last):\n  File "{script}", line 3')
    assert r.stderr.endswith("ValueError: from the job\n")
    assert "fastmath" not in r.stderr and "runpy" not in r.stderr, r.stderr


@pytest.mark.skipif(not COMMAND.exists(), reason="the fastmath command is not installed")
def test_a_module_is_found_in_the_current_folder_as_python_finds_it(tmp_path):
    # python -m puts the current folder first on sys.path; the installed command, unlike
    # python -m fastmath, does not have it there already
    (tmp_path / "jobmod.py").write_text("import sys; print(sys.argv[1:], __name__)")
    r = fastmath_run("-m", "jobmod", "-x", cwd=tmp_path, command=[str(COMMAND)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['-x']", "__main__"]


def test_without_anything_to_run_the_usage_says_what_is_optional():
    r = fastmath_run()
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "required" not in r.stderr
    assert "(script | -m module | -c code) [arg ...]" in r.stderr
    assert "give a script, -m module or -c code" in r.stderr
    for option in ("-m", "-c"):
        r = fastmath_run(option)
        assert r.returncode == 2 and f"argument {option}: expected" in r.stderr, r.stderr
