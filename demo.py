"""`make demo`: from nothing downloaded to a pretrained tiny ELECTRA, on any CPU, in minutes.

1. writes an English corpus from Python's own documentation;
2. learns a WordPiece vocab from it;
3. builds pretraining TFRecords with a held-out evaluation set and prints their statistics;
4. pretrains the `tiny` preset (progress lines, TensorBoard logs, checkpoints, results);
5. plots generator loss, discriminator loss and accuracy to a PNG;
6. shows replaced token detection on a held-out example: the generator's replacements and the
   discriminator's probability of "replaced" for every token.
The output directory is a `--data-dir` as run_pretraining.py expects (vocab.txt,
pretrain_tfrecords/, models/tiny/).
"""

import argparse
import sys
from pathlib import Path

from electra_tf.cli import exit_code, quiet_tensorflow_logs, use_pooled_cpu_allocator


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default="demo_output", help="the demo's data directory")
    parser.add_argument("--vocab-size", type=int, default=4000, help="size of the learned vocab")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--train-steps", type=int, default=600, help="pretraining steps (batch 32)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet_tensorflow_logs()
    use_pooled_cpu_allocator()
    from pretrain_data import demo_report
    from pretrain_data.build import BuildOptions, build_pretraining_dataset
    from pretrain_data.default_corpus import write_default_corpus
    from pretrain_data.vocab_learning import VocabOptions, build_vocab

    data_dir = Path(args.output_dir)

    def job():
        corpus = write_default_corpus(data_dir / "corpus")
        print(f"[1/6] corpus: {corpus} ({corpus.stat().st_size / 1e6:.2f} MB of Python documentation)")
        vocab = build_vocab(VocabOptions(corpus=[str(corpus.parent)], output=str(data_dir / "vocab.txt"),
                                         vocab_size=args.vocab_size, overwrite=True, quiet=True))
        print(f"[2/6] vocab: {data_dir / 'vocab.txt'} ({vocab['vocab_size']:,} WordPiece tokens, "
              f"learned in {vocab['seconds']:.0f} s)")
        stats = build_pretraining_dataset(BuildOptions(
            corpus_dir=str(corpus.parent), vocab_file=str(data_dir / "vocab.txt"),
            output_dir=str(data_dir / "pretrain_tfrecords"), max_seq_length=args.max_seq_length,
            eval_fraction=0.05, overwrite=True, quiet=True))
        print(f"[3/6] pretraining data: {data_dir / 'pretrain_tfrecords'}")
        print(demo_report.data_report(stats, data_dir / "pretrain_tfrecords", data_dir / "vocab.txt"))
        pretrain(data_dir, vocab["vocab_size"], args)

    return exit_code(job)


def pretrain(data_dir: Path, vocab_size: int, args) -> None:
    """Steps 4-6: pretrain the tiny preset, plot its curves, show replaced token detection."""
    import shutil

    from electra_tf.config import PretrainingConfig
    from electra_tf.rtd_inspection import replaced_token_table
    from electra_tf.tokenization import load_vocab
    from electra_tf.training import pretraining_runner
    from electra_tf.training.curves import plot_training_curves
    from pretrain_data.demo_report import held_out_example
    from pretrain_data.input_pipeline import pretraining_dataset_fns

    model_dir = data_dir / "models" / "tiny"
    shutil.rmtree(model_dir, ignore_errors=True)  # the demo trains afresh every time
    config = PretrainingConfig.from_hparams("tiny", data_dir, {
        "model_size": "tiny", "vocab_size": vocab_size, "max_seq_length": args.max_seq_length,
        "num_train_steps": args.train_steps, "log_every": 50, "iterations_per_loop": 50,
        "save_checkpoints_steps": 200, "do_eval": True, "num_eval_steps": 10, "eval_batch_size": 32})
    print(f"[4/6] pretraining the tiny preset for {config.num_train_steps} steps of {config.train_batch_size} "
          f"examples into {model_dir} (TensorBoard: tensorboard --logdir {model_dir})")
    train_fn, eval_fn = pretraining_dataset_fns(config)
    output = pretraining_runner.run(config, train_fn, eval_fn, pretraining_runner.special_ids(config))
    results = output.results
    print(f"held-out evaluation: generator accuracy {results['masked_lm_accuracy']:.3f}, discriminator "
          f"accuracy {results['disc_accuracy']:.3f}, AUC {results['disc_auc']:.3f} "
          f"(all metrics: {config.results_json})")
    png = plot_training_curves(model_dir / "train", model_dir / "training_curves.png")
    print(f"[5/6] training curves: {png}")
    print("[6/6] replaced token detection on a held-out example:")
    vocab = load_vocab(config.vocab_file)
    features = held_out_example(config.eval_tfrecords, config.max_seq_length, vocab.index("[SEP]"), max_tokens=40)
    print(replaced_token_table(output.model, vocab, features))


if __name__ == "__main__":
    sys.exit(main())
