"""`make demo`: from nothing downloaded to a pretrained tiny ELECTRA, on any CPU, in minutes.

1. writes an English corpus from Python's own documentation;
2. learns a WordPiece vocab from it;
3. builds pretraining TFRecords with a held-out evaluation set and prints their statistics;
4. pretrains the `tiny` preset with the paper's recipe, evaluating on every held-out example
   every 50 steps (progress lines, TensorBoard logs, checkpoints, results);
5. prints the held-out learning curve (real-token AUC, generator accuracy, discriminator loss
   against a constant predictor's) and plots it with the training losses to a PNG;
6. shows replaced token detection on a held-out example: the generator's replacements and the
   discriminator's probability of "replaced" for every token;
7. says in plain words what this scale shows and what it cannot.
`--hparams` overrides any pretraining setting (e.g. '{"temperature": 3.0}'), for experiments
that are not the paper's recipe.
The output directory is a `--data-dir` as run_pretraining.py expects (vocab.txt,
pretrain_tfrecords/, models/tiny/).
"""

import argparse
import sys
from pathlib import Path

from electra_tf.cli import exit_code, script_parser, start_tensorflow
from electra_tf.errors import InputError

EXAMPLE = "python demo.py --output-dir demo_output --train-steps 600"


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__, EXAMPLE)
    parser.add_argument("--output-dir", default="demo_output", help="the demo's data directory")
    parser.add_argument("--vocab-size", type=int, default=4000, help="maximum size of the learned vocab")
    parser.add_argument("--max-seq-length", type=int, default=128, help="tokens per example")
    parser.add_argument("--train-steps", type=int, default=600, help="pretraining steps (batch 32)")
    parser.add_argument("--hparams", default="{}",
                        help="pretraining hparams over the demo's (JSON object or .json path), "
                             "e.g. '{\"temperature\": 3.0}': not the paper's recipe")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    start_tensorflow(pooled_allocator=True)
    from pretrain_data import inspection
    from pretrain_data.build import BuildOptions, build_pretraining_dataset
    from pretrain_data.default_corpus import write_default_corpus
    from pretrain_data.vocab_learning import VocabOptions, build_vocab

    data_dir = Path(args.output_dir)

    def job():
        corpus = write_default_corpus(data_dir / "corpus")
        print(f"[1/7] corpus: {corpus} ({corpus.stat().st_size / 1e6:.2f} MB of Python documentation)")
        vocab = build_vocab(VocabOptions(corpus=[str(corpus.parent)], output=str(data_dir / "vocab.txt"),
                                         vocab_size=args.vocab_size, overwrite=True, quiet=True))
        print(f"[2/7] vocab: {data_dir / 'vocab.txt'} ({vocab['vocab_size']:,} WordPiece tokens, "
              f"learned in {vocab['seconds']:.0f} s)")
        stats = build_pretraining_dataset(BuildOptions(
            corpus_dir=str(corpus.parent), vocab_file=str(data_dir / "vocab.txt"),
            output_dir=str(data_dir / "pretrain_tfrecords"), max_seq_length=args.max_seq_length,
            eval_fraction=0.05, overwrite=True, quiet=True))
        print(f"[3/7] pretraining data: {data_dir / 'pretrain_tfrecords'}")
        print(inspection.data_report(stats, data_dir / "pretrain_tfrecords", data_dir / "vocab.txt"))
        pretrain(data_dir, vocab["vocab_size"], args)

    return exit_code(job)


def pretrain(data_dir: Path, vocab_size: int, args) -> None:
    """Steps 4-7: pretrain the tiny preset, show its curves and replaced token detection, sum up."""
    import shutil

    from demo_support.curves import eval_curve_table, plot_training_curves
    from demo_support.rtd_inspection import replaced_token_table
    from demo_support.run_summary import summarize_run
    from electra_tf.config import PretrainingConfig, has_rtd_loss
    from electra_tf.hparams import load_hparams
    from electra_tf.tokenization import load_vocab
    from electra_tf.training import pretraining_runner
    from electra_tf.training.reporting import read_scalars
    from pretrain_data.inspection import held_out_example
    from pretrain_data.input_pipeline import check_pretraining_data, pretraining_dataset_fns

    model_dir = data_dir / "models" / "tiny"
    user, _ = load_hparams(args.hparams)
    config = PretrainingConfig.from_hparams("tiny", data_dir, {
        "model_size": "tiny", "vocab_size": vocab_size, "max_seq_length": args.max_seq_length,
        "num_train_steps": args.train_steps, "log_every": 50, "iterations_per_loop": 50,
        "save_checkpoints_steps": 200, "do_eval": True, "eval_every_steps": 50, "eval_batch_size": 32,
        **user})
    print(f"[4/7] pretraining the tiny preset for {config.num_train_steps} steps of {config.train_batch_size} "
          f"examples into {model_dir} (TensorBoard: tensorboard --logdir {model_dir})")
    if not (config.do_eval and config.eval_every_steps):
        raise InputError("--hparams do_eval false or eval_every_steps 0: the demo reports the held-out "
                         "learning curve, so it needs both")
    if not has_rtd_loss(config.objective):
        raise InputError(f"--hparams objective {config.objective!r}: the demo shows replaced token "
                         "detection, so it needs objective \"electra\" or \"electra_15\"")
    shutil.rmtree(model_dir, ignore_errors=True)  # the demo trains afresh every time
    if user:
        print(f"      settings changed by --hparams (not the paper's recipe): {user}")
    train_fn, eval_fn = pretraining_dataset_fns(config)
    output = pretraining_runner.run(config, train_fn, eval_fn, pretraining_runner.special_ids(config),
                                    check_data=lambda: check_pretraining_data(config))
    print(f"(all metrics: {config.results_json})")
    print("[5/7] held-out learning curve (every held-out example, same masks at every step):")
    print(eval_curve_table(model_dir))
    png = plot_training_curves(model_dir, model_dir / "training_curves.png")
    print(f"      plotted with the training losses: {png}")
    print("[6/7] replaced token detection on a held-out example:")
    vocab = load_vocab(config.vocab_file)
    features = held_out_example(config.eval_tfrecords, config.max_seq_length, vocab.index("[SEP]"), max_tokens=40)
    print(replaced_token_table(output.model, vocab, features))
    first = {tag: points[0][1] for tag, points in read_scalars(model_dir / "eval").items()}
    disc = config.discriminator_config()
    scale = (f"{disc.num_hidden_layers} layers, {disc.hidden_size} wide, {config.num_train_steps} steps "
             f"of {config.train_batch_size} x {config.max_seq_length} tokens")
    print("[7/7] " + summarize_run(first, output.results, scale))


if __name__ == "__main__":
    sys.exit(main())
