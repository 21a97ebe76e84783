"""What the command-line scripts share: their `--help` layout, common flags (the `run_*.py`
scripts' three, the casing pairs), the TensorFlow settings they make before TensorFlow is
imported or allocates (tf_keras as `tf.keras`, quiet logs without a GPU, the pooled allocator),
and how errors become exit codes.

Nothing here imports TensorFlow at import time: the scripts parse their arguments first and import
it afterwards, so `--help` is instant and silent."""

import argparse
import ctypes
import mmap
import os
import re
import shutil
import signal
import sys
from typing import Callable

from electra_tf import disk_full
from electra_tf.errors import DirectoryInUse, DiskFull, InputError, Interrupted, WorkerLost


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`--help` that keeps the docstring's layout and ends each option's text with its default,
    or "(required)"; an option whose text already says what its default is is left as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required:
            return f"{text} (required)".strip()
        if "default" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)".strip()


def script_parser(doc: str, example: str, **kwargs) -> argparse.ArgumentParser:
    """An ArgumentParser with `doc` as its description and one example command as its epilog."""
    return argparse.ArgumentParser(description=doc, epilog=f"example:\n  {example}",
                                   formatter_class=HelpFormatter, **kwargs)


def run_parser(doc: str, data_dir_help: str, model_name_help: str, example: str) -> argparse.ArgumentParser:
    """`--data-dir`, `--model-name` and `--hparams` (a JSON object or a .json path), as the original."""
    run = script_parser(doc, example)
    run.add_argument("--data-dir", required=True, help=data_dir_help)
    run.add_argument("--model-name", required=True, help=model_name_help)
    run.add_argument("--hparams", default="{}", help="JSON object, or a path ending in .json")
    return run


def add_casing_flags(parser: argparse.ArgumentParser) -> None:
    """The tokenizer's casing as flag pairs, as the original's scripts spell them (both on by default)."""
    parser.add_argument("--do-lower-case", dest="do_lower_case", action="store_true", default=True,
                        help="lower-case before WordPiece (default: on)")
    parser.add_argument("--no-lower-case", dest="do_lower_case", action="store_false",
                        help="keep the case (a cased vocab; default: off)")
    parser.add_argument("--do-strip-accents", dest="do_strip_accents", action="store_true", default=True,
                        help="drop accents, only together with lower-casing, as the tokenizer (default: on)")
    parser.add_argument("--no-strip-accents", dest="do_strip_accents", action="store_false",
                        help="keep accents (default: off)")


def use_pooled_cpu_allocator() -> None:
    """Makes TensorFlow's CPU allocator a growing BFC pool (`TF_CPU_ALLOCATOR_USE_BFC=true`) unless
    the user set that variable. TF's default CPU allocator hands large buffers back to the OS, so on
    some machines each training step faults about 1 GB of fresh pages in again (300k page faults and
    13 % of an ELECTRA-Small step's CPU time at batch 32 on the AMD EPYC of benchmarks/RESULTS.md;
    how much depends on the C library and kernel); the pool keeps them. TF reads the variable when it
    first allocates a tensor, so this must run before that (importing TensorFlow is fine)."""
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def use_tf_keras_only() -> None:
    """Makes TensorFlow's `tf.keras` tf_keras (`TF_USE_LEGACY_KERAS=1`), unless the user set that
    variable or TensorFlow is imported already (then it would do nothing, and a process that calls
    a script's `main` leaves its environment as it was). Every model here is built with tf_keras,
    never Keras 3; without the variable, TensorFlow 2.20's import loads Keras 3 in full all the same
    (scikit-learn and matplotlib with it): 1.5-2 s of CPU at each command's start on a 2-core AMD
    EPYC, a quarter of importing what run_pretraining.py imports (7.7 s against 5.9 s). TensorFlow
    reads the variable when it is first imported, so call this before that."""
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def quiet_tensorflow_logs() -> None:
    """Hides TensorFlow's C++ INFO and WARNING lines, and on a machine without an NVIDIA GPU also
    its ERROR lines, unless the user set `TF_CPP_MIN_LOG_LEVEL`; then imports TensorFlow.

    Without a GPU, importing TensorFlow prints an ERROR line, `failed call to cuInit: ... UNKNOWN
    ERROR (303)`, that users read as a failure; level 3 hides it. Where a driver is present
    (/proc/driver/nvidia, or nvidia-smi on the PATH) the level is 2, so that a real GPU problem stays
    visible. TensorFlow reads the variable when it is first imported, so call this before that (and
    after parsing the flags: `--help` stays fast). Some of TensorFlow's libraries (XLA's `Compiled
    cluster using XLA!`) log through Abseil, which ignores the variable: its minimum level is set
    to match through Abseil's `SetMinLogLevel` in TensorFlow's own library."""
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    has_nvidia = os.path.exists("/proc/driver/nvidia") or shutil.which("nvidia-smi") is not None
    level = 2 if has_nvidia else 3
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = str(level)
    import tensorflow as tf
    library = os.path.join(tf.sysconfig.get_lib(), "libtensorflow_framework.so.2")
    try:  # the symbol's name carries Abseil's release, so it is looked up in the library's symbol table
        with open(library, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = data.find(b"14SetMinLogLevelENS0_18LogSeverityAtLeastE")
            symbol = re.fullmatch(rb"_ZN4absl12lts_\d+", data[data.rfind(b"_ZN4absl", max(end - 40, 0), end):end])
        if end > 0 and symbol is not None:  # Abseil's severities: 2 error, 3 fatal
            ctypes.CDLL(library)[symbol.group().decode() + "14SetMinLogLevelENS0_18LogSeverityAtLeastE"](level)
    except (OSError, ValueError, AttributeError):
        pass  # another build of TensorFlow: its Abseil lines stay


def start_tensorflow(pooled_allocator: bool = False, sigterm_unwinds: bool = False) -> None:
    """What a script does once its flags are parsed, in this order: tf_keras as `tf.keras`, quiet
    logs (which imports TensorFlow), then optionally the pooled allocator (before anything is
    allocated: the long jobs) and SIGTERM as `SystemExit(143)`, so that a job writing one output
    file unwinds and leaves none half-written."""
    use_tf_keras_only()
    quiet_tensorflow_logs()
    if pooled_allocator:
        use_pooled_cpu_allocator()
    if sigterm_unwinds:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def exit_code(job: Callable[[], None]) -> int:
    """Runs `job`: 0 when it ends, 2 on bad input (or a path it may not read or write), 1 when
    the loss diverged, another worker was lost (the last good checkpoint is kept), a write found
    the disk full or another process writes to the same directory, 128 + the signal's number when
    SIGTERM or SIGINT stopped it (after a checkpoint; 130 for a second Ctrl-C, without one); an
    error is one line on stderr.

    A full disk that the job did not report itself (as `DiskFull`, saying what is intact) is
    reported here, naming the file the error names; a checkpoint it was saving is cleaned up."""
    try:
        with disk_full.reported(lambda: "what was written before is intact; free space and run the "
                                        "same command again"):
            job()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except PermissionError as error:  # a file or folder the user cannot read or write: their setup, not a bug
        print(f"error: permission denied: {error.filename or error}", file=sys.stderr)
        return 2
    except Interrupted as stop:
        print(f"stopped: {stop}", file=sys.stderr)
        return stop.exit_status
    except KeyboardInterrupt:
        print("stopped by Ctrl-C, without saving", file=sys.stderr)
        return 128 + signal.SIGINT
    except (FloatingPointError, WorkerLost, DiskFull, DirectoryInUse) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
