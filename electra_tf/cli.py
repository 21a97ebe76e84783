"""What the `run_*.py` scripts share: their three flags, and how errors become exit codes."""

import argparse
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
