"""How the sandbox runs a Python program, as `python -I -S -B PATH ARGS` runs a script (standard
library only: imported from beside itself inside the sandbox, by the warm sandbox's init and by
`inner.py` for `unsafe_local`).

The interpreter runs isolated (`-I`: no environment variables, no user site, the script's
directory off the import path), without `site` (`-S`: no site-packages or .pth files on the path)
and writes no bytecode (`-B`). What a program then finds is what the standard interpreter gives
it:
- its own future flags only: it is compiled with none inherited from graft's code (the sandbox's
  scripts import `annotations` from the future, which would turn a program's annotations into
  strings and break a dataclass field's type used at run time);
- a `__main__` module in `sys.modules` (dataclasses, pickle and typing look a class's module up
  there);
- the names `site` gives an interpreter: `exit`, `quit`, `help`, `copyright`, `credits` and
  `license` (many competitive programs end with `exit()`), made by `site`'s own functions without
  the rest of what `site` does;
- CPython's signal dispositions: SIGPIPE and SIGXFSZ ignored (a closed pipe is BrokenPipeError, a
  file past its size limit OSError), SIGINT raising KeyboardInterrupt (`_thread.interrupt_main`
  relies on it);
- fresh standard streams and a fresh random seed; at its end, its threads joined and its atexit
  handlers run, as at the interpreter's exit.
"""

from __future__ import annotations

import contextlib
import signal
import sys

IGNORED_SIGNALS = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")
"""What CPython ignores at start-up (where the platform has it)."""


def site_names() -> None:
    """exit, quit, help, copyright, credits and license in builtins, as `site` makes them."""
    import site

    site.setquit()
    site.setcopyright()
    site.sethelper()


def python_signals() -> None:
    """The dispositions CPython sets at start-up (whatever this process inherited)."""
    for name in IGNORED_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def std_streams() -> None:
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def run_python(path: str, argv: list[str], compiled: dict | None = None) -> int:
    """Run the script at `path` with `argv`; its exit status. graft's own scripts find the code
    compiled for them in their `__compiled__` ((name, source) -> code; `compiled`)."""
    import atexit
    import random
    import threading
    import traceback
    import types

    std_streams()
    site_names()
    python_signals()
    random.seed()
    sys.argv = [path, *argv]
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(path, "rb") as f:
            source = f.read()
        ready = (compiled or {}).get((path, source))
        if ready is not None:
            main.__compiled__ = compiled
        exec(ready or compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException as exc:
        traceback.print_exception(exc)
        code = 1
    for finish in (threading._shutdown, atexit._run_exitfuncs):  # as the interpreter's exit
        with contextlib.suppress(BaseException):
            finish()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120
    return code


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter exits with for `exc` (a message goes to stderr, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1
