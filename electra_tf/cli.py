"""What the `run_*.py` scripts share: their three flags, the TensorFlow runtime setting they make
before any tensor exists, and how errors become exit codes."""

import argparse
import os
import sys
from typing import Callable

from electra_tf.errors import InputError


def run_arguments(doc: str, data_dir_help: str, model_name_help: str, argv=None) -> argparse.Namespace:
    """`--data-dir`, `--model-name` and `--hparams` (a JSON object or a .json path), as the original."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help=data_dir_help)
    parser.add_argument("--model-name", required=True, help=model_name_help)
    parser.add_argument("--hparams", default="{}", help="JSON object, or a path ending in .json")
    return parser.parse_args(argv)


def use_pooled_cpu_allocator() -> None:
    """Makes TensorFlow's CPU allocator a growing BFC pool (`TF_CPU_ALLOCATOR_USE_BFC=true`) unless
    the user set that variable. TF's default CPU allocator hands large buffers back to the OS, so on
    some machines each training step faults about 1 GB of fresh pages in again (300k page faults and
    13 % of an ELECTRA-Small step's CPU time at batch 32 on the AMD EPYC of benchmarks/RESULTS.md;
    how much depends on the C library and kernel); the pool keeps them. TF reads the variable when it
    first allocates a tensor, so this must run before that (importing TensorFlow is fine)."""
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def exit_code(job: Callable[[], None]) -> int:
    """Runs `job`: 0 when it ends, 2 on bad input, 1 when the loss diverged (the last good
    checkpoint is kept); an error is one line on stderr."""
    try:
        job()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except FloatingPointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
