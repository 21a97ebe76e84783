"""Convert ELECTRA checkpoints between the original release, this project, HF transformers and
SavedModel (docs/checkpoints.md).

    python convert_checkpoint.py from-original --checkpoint PATH --output-dir D/models/M
    python convert_checkpoint.py to-original   --model-dir D/models/M --output-dir OUT [--step N]
    python convert_checkpoint.py to-hf         --model-dir D/models/M --output-dir OUT [--step N] [--dtype float16]
    python convert_checkpoint.py from-hf       --hf-dir DIR --output-dir D/models/M
    python convert_checkpoint.py saved-model   --model-dir D/models/M --output-dir OUT [--step N]
    python convert_checkpoint.py saved-model   --model-dir D/models/M/finetuning_models/mrpc_model_1
                                               [--task mrpc] --output-dir OUT [--precision mixed_bfloat16]
    python convert_checkpoint.py litert        --model-dir D/models/M/finetuning_models/sst_model_1
                                               --output-dir OUT [--int8] [--task sst]

A model dir is what run_pretraining.py writes (config.json, vocab.txt, ckpt-N); saved-model also
takes a trial's dir of run_finetuning.py (a classifier, regressor, tagger or SQuAD model on raw text; --task
picks one task of a multi-task run; --precision mixed_bfloat16 serves in bfloat16). litert exports a
trial's classifier, multi-label task or regressor for ai_edge_litert's interpreter (online serving;
--int8 quantizes its weights; finetune.litert). to-original, to-hf and saved-model export a model
dir's latest checkpoint, or its ckpt-N with --step N. Imports print a load report (loaded / missing /
unused variables); an existing output dir needs --overwrite.
"""

import argparse
import sys
from pathlib import Path

from electra_tf.cli import HelpFormatter, exit_code, script_parser, start_tensorflow
from electra_tf.errors import InputError

# One example per subcommand, shown by its --help (the first also by the top-level --help).
EXAMPLES = {
    "from-original": "python convert_checkpoint.py from-original --checkpoint downloads/electra_small "
                     "--output-dir data/models/electra_small",
    "to-original": "python convert_checkpoint.py to-original --model-dir data/models/my_small --output-dir out/tf1",
    "to-hf": "python convert_checkpoint.py to-hf --model-dir data/models/my_small --output-dir out/hf",
    "from-hf": "python convert_checkpoint.py from-hf --hf-dir out/hf --output-dir data/models/from_hf",
    "saved-model": "python convert_checkpoint.py saved-model --model-dir data/models/my_small --output-dir out/served",
    "litert": "python convert_checkpoint.py litert --model-dir data/finetuning_models/sst_model_1 --output-dir out/lite "
              "--int8",
}


def step_number(text: str) -> int:
    """--step's type: a non-negative integer."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a checkpoint's step is a non-negative integer, not {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, EXAMPLES["from-original"])
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name, help_text, source, source_help):
        sub = commands.add_parser(name, help=help_text, description=help_text,
                                  epilog=f"example:\n  {EXAMPLES[name]}", formatter_class=HelpFormatter)
        sub.add_argument(source, required=True, help=source_help)
        sub.add_argument("--output-dir", required=True, help="created; must not exist unless --overwrite")
        sub.add_argument("--overwrite", action="store_true", help="replace an existing output dir")
        return sub

    for name in ("from-original", "from-hf"):
        source = ("--checkpoint", "TF1 checkpoint prefix or its directory") if name == "from-original" else (
            "--hf-dir", "HF dir: discriminator and/or generator (or both as subdirs)")
        sub = command(name, f"import into a model dir ({name[5:]} format)", *source)
        sub.add_argument("--hparams", default=None,
                         help="architecture as JSON or a .json path (default: inferred from the weights)")
        if name == "from-original":
            sub.add_argument("--vocab-file", default=None, help="the vocab (default: vocab.txt beside the checkpoint)")
    model_dir_help = "a model dir written by run_pretraining.py (its latest checkpoint is used)"
    for name, help_text in (("to-original", "export to the original release's TF1 naming"),
                            ("to-hf", "export to HF transformers dirs")):
        sub = command(name, help_text, "--model-dir", model_dir_help.replace("is used", "or --step's"))
        sub.add_argument("--step", type=step_number, default=None,
                         help="export the model dir's ckpt-STEP instead of its latest")
        if name == "to-hf":
            sub.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                             help="the weights' dtype in the files: float16 halves them (config.json says which)")
    served = command("saved-model", "export the discriminator, or a fine-tuned model of any task type, as a "
                     "SavedModel on raw text", "--model-dir", model_dir_help + ", or a fine-tuning trial's "
                     "finetuning_models/<tasks>_model_<trial>")
    served.add_argument("--step", type=step_number, default=None,
                        help="pretrained model dirs: export ckpt-STEP instead of the latest")
    served.add_argument("--task", default=None, help="fine-tuned dirs: the task to serve (default: the run's only one)")
    served.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32",
                        help="the served graph's compute: mixed_bfloat16 runs its matmuls in bfloat16 on the "
                             "float32 weights; outputs stay float32")
    lite = command("litert", "export a fine-tuned classifier, multi-label task or regressor as a LiteRT model "
                   "with its tokenizer (serve it with finetune.litert.LiteServer: lower batch-1 latency than "
                   "the SavedModel)", "--model-dir",
                   "a fine-tuning trial's finetuning_models/<tasks>_model_<trial>")
    lite.add_argument("--task", default=None, help="the task to serve (default: the run's only one)")
    lite.add_argument("--int8", action="store_true",
                      help="dynamic-range quantization: int8 weights, about 1/4 of the file and faster; costs a "
                           "little accuracy (docs/finetuning.md)")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_tensorflow()
    from electra_tf.checkpoints import convert, saved_model

    def job():
        if args.command == "from-original":
            report = convert.from_original(args.checkpoint, args.output_dir, args.hparams, args.vocab_file,
                                           args.overwrite)
        elif args.command == "from-hf":
            report = convert.from_hf(args.hf_dir, args.output_dir, args.hparams, args.overwrite)
        elif args.command == "saved-model":
            if not Path(args.model_dir).is_dir():
                raise InputError(f"model dir {args.model_dir} does not exist")
            from finetune import saved_model as finetuned
            if finetuned.is_trial_dir(args.model_dir):
                if args.step is not None:
                    raise InputError(f"--step: {args.model_dir} is a fine-tuning trial's dir (one model, no steps)")
                server = finetuned.export_finetuned(args.model_dir, args.output_dir, args.task, args.overwrite,
                                                    args.precision)
                outputs = ", ".join(server.serve.get_concrete_function().structured_outputs)
                print(f"wrote {args.output_dir} (task {server.task.name}: {outputs} on raw text)")
                return
            if args.task is not None:
                raise InputError(f"--task: {args.model_dir} is a pretrained model dir (no fine-tuned model)")
            report = saved_model.export_saved_model(args.model_dir, args.output_dir, args.overwrite, args.precision,
                                                   args.step)
        elif args.command == "litert":
            from finetune import litert
            card = litert.export(args.model_dir, args.output_dir, args.int8, args.task, args.overwrite)
            print(f"wrote {args.output_dir} (task {card['task']}, {'int8' if args.int8 else 'float32'} weights)")
            return
        elif args.command == "to-original":
            print(f"wrote {convert.to_original(args.model_dir, args.output_dir, args.overwrite, args.step)}")
            return
        else:
            roles = convert.to_hf(args.model_dir, args.output_dir, args.overwrite, args.step, args.dtype)
            print("wrote " + ", ".join(f"{args.output_dir}/{role}" for role in roles))
            return
        print(report.summary())
        print(f"wrote {args.output_dir}")

    return exit_code(job)


if __name__ == "__main__":
    sys.exit(main())
