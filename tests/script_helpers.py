"""The command-line scripts as the doc and help tests see them: where they are, their parsers, and
the arguments of a command line that runs one."""

import importlib.util
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ("build_vocab.py", "build_pretraining_dataset.py", "run_pretraining.py", "run_finetuning.py", "predict.py",
           "convert_checkpoint.py", "fill_mask.py", "demo.py", "benchmarks/data_build.py", "benchmarks/finetune_padding.py",
           "benchmarks/pretrain_throughput.py", "benchmarks/finetune_throughput.py", "benchmarks/serving.py",
           "benchmarks/profile_step.py", "experiments/electra_vs_mlm/replicate_paper.py",
           "experiments/electra_vs_mlm/diagnostics/pretrain_peer_curve.py")
SHELL_OPERATORS = {"&&", "||", "|", ";", ">", ">>", "<", "&"}


def load_script(relative_path: str):
    """The script's module, loaded from its file (it must define `build_parser()`)."""
    path = REPO / relative_path
    name = "script_" + relative_path.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_call(tokens: List[str]) -> Optional[Tuple[str, List[str]]]:
    """(script path relative to the repo, its arguments) when the shell words run a Python script of
    this repository, else None. Arguments end at the first shell operator."""
    for index, token in enumerate(tokens):
        if token.endswith(".py") and (REPO / token).is_file():
            arguments = tokens[index + 1:]
            for end, word in enumerate(arguments):
                if word in SHELL_OPERATORS:
                    return token, arguments[:end]
            return token, arguments
    return None
