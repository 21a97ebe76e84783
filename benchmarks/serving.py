"""Serving on CPU: the exported SavedModel (raw text in) vs. an HF `pipeline("text-classification")`
on the same weights (issue #19).

The model is a fine-tuned SST-2 classifier: a trial dir of run_finetuning.py (`--model-dir`), or,
without one, ELECTRA-`--model-size` fine-tuned here from random weights for `--train-steps` steps
(the speed does not depend on the weights). It is exported twice:
- ours: `convert_checkpoint.py saved-model` (tokenization in the graph, TensorFlow's ops only),
  loaded with `tf.saved_model.load` and called through its `serving_default` signature; ours_bf16
  is the same export with `--precision mixed_bfloat16` (bfloat16 matmuls), served the same way;
- hf: the same encoder weights as an HF `ElectraForSequenceClassification` dir (the tensor names of
  `to-hf`), read by `pipeline("text-classification")` with its fast WordPiece tokenizer (truncation
  at 128 tokens). HF's head is dense(H, H) -> GELU -> dense(H, C), the original's one dense(H, C):
  the first dense is written as the identity plus a shift, where GELU is the identity in float32,
  and the shift is taken back out of the second's bias, so both compute the same logits
  (`benchmarks.hf_peer_models`; the benchmark checks that both give the same labels on the dev
  sentences).

Each variant runs in a fresh process per measurement; the two of a pair take turns request after
request (`benchmarks.peers`): batch-1 latency (p50 / p90 / p99 over `--requests` single dev sentences),
batch-32 throughput (examples/s over `--batches` batches of dev sentences), start-up time (process
start to the first answer: imports, loading, the first call) and peak resident memory.

    .venv/bin/python benchmarks/serving.py [--model-dir TRIAL_DIR] [--requests 200] [--batches 20] [--pause 0.3] [--turn 10 --settle 0.2]
        [--variants ours,hf,hf_passive] [--quick]

`--variants ours_predict,hf --base ours_predict` measures `predict.py`'s path instead (issue #43:
`finetune.predicting.Predictor` on the trial dir, plain-text rows, dynamic padding, JSON rows
out) against HF's pipeline. `--variants ours,ours_bf16` compares the float32 and the bf16 SavedModel of the same weights.
`--variants ours,ort,ort_int8` adds ONNX Runtime float32 and int8 on the same weights
(`benchmarks.onnx_peer`: an HF export through `torch.onnx.export`, `quantize_dynamic` for int8);
`ours_lite` and `ours_lite_int8` serve `convert_checkpoint.py litert [--int8]`'s export (`finetune.litert`).
`--variants tagger_predict,hf_tagger --base tagger_predict` is the token-classification pair (issue
#43): `predict.py`'s Predictor on a CoNLL-2000 chunking trial (`--tagger-model-dir`, or fine-tuned
here as the SST-2 model is) tagging the held-out tenth of train.txt (the chunk preset's dev split),
a sentence a row, against `pipeline("token-classification")` on the same weights as an HF
`ElectraForTokenClassification` (its classifier is the tagging head's dense layer; both tag a word
by its first sub-token), compared on the tags of the words that are not O.
`--intra-op-threads 1` serves ours with one intra-op thread (TF_NUM_INTRAOP_THREADS, as TF Serving's
`--tensorflow_intra_op_parallelism`): on 2 cores a batch-1 request's small matmuls lose more to
splitting than they gain.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from electra_tf.cli import script_parser  # noqa: E402
from benchmarks import onnx_peer  # noqa: E402
from benchmarks.hf_peer_models import write_hf_classifier, write_hf_tagger  # noqa: E402
from benchmarks.peers import SHARED_DATA as SHARED, Worker, pair_groups, run_groups, serve, worker_env  # noqa: E402

DEV = SHARED / "glue" / "SST-2" / "dev.tsv"
VARIANTS = ("ours", "hf", "hf_passive", "ours_no_onednn", "ours_bf16", "ours_predict", "ort", "ort_int8", "ours_lite",
            "ours_lite_int8", "tagger_predict", "hf_tagger")
TAGGERS = ("tagger_predict", "hf_tagger")  # the token-classification pair
LABELS = {"ours": "ours (SavedModel, TF)", "hf": "HF pipeline (PyTorch)", "hf_passive": "HF, OMP passive",
          "ours_no_onednn": "ours, oneDNN off", "ours_bf16": "ours, bf16 SavedModel",
          "ours_predict": "ours, predict.py's Predictor", "ort": "ONNX Runtime float32",
          "ort_int8": "ONNX Runtime int8", "ours_lite": "ours, LiteRT float32", "ours_lite_int8": "ours, LiteRT int8",
          "tagger_predict": "ours, predict.py, chunking", "hf_tagger": "HF token-classification"}
LITE_EXPORTS = {"ours_lite": "litert", "ours_lite_int8": "litert_int8"}  # variant -> dir under the work dir
EXPORTS = {"float32": "saved_model", "mixed_bfloat16": "saved_model_bf16"}  # precision -> dir under the work dir
AGREEMENT_ROWS = 128  # dev sentences whose labels the two servers must agree on


def dev_sentences() -> list:
    lines = DEV.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0] for line in lines]


def held_out_sentences() -> list:
    """The chunk preset's dev split (the last tenth of CoNLL-2000's train.txt), its words joined by spaces."""
    from finetune import chunking
    return [" ".join(sentence.words) for sentence in chunking.read_split(SHARED / "conll2000", "dev")]


# ----------------------------------------------------------------------------- preparing the model

def fine_tune(model_size: str, steps: int, out: Path, task: str = "sst") -> Path:
    """A trial dir of run_finetuning.py: SST-2 (or `task` "chunk": CoNLL-2000) from random weights,
    `steps` steps of batch 32."""
    raw_data = SHARED / "glue"
    if task == "chunk":  # the preset reads <raw data>/chunk/train.txt and holds its last tenth out
        raw_data = out / "data"
        raw_data.mkdir(parents=True, exist_ok=True)
        if not (raw_data / "chunk").exists():
            (raw_data / "chunk").symlink_to(SHARED / "conll2000")
    hparams = dict(task_names=[task], model_size=model_size, recipe="paper", random_init=True, do_eval=False,
                   vocab_file=str(SHARED / "vocab" / "vocab.txt"), raw_data_dir=str(raw_data),
                   max_examples=32 * steps, num_train_epochs=1.0, finetuning_models_dir=str(out / "models"),
                   results_dir=str(out / "results"))
    subprocess.run([sys.executable, "run_finetuning.py", "--data-dir", str(out), "--model-name", "bench",
                    "--hparams", json.dumps(hparams)], cwd=REPO, check=True, env=worker_env())
    return out / "models" / f"{task}_model_1"


def prepare_tagger(args, work: Path) -> None:
    """`work`/hf_tagger and tagger_dir.txt from the chunking trial (fine-tuned here without
    --tagger-model-dir), unless `work` holds them already."""
    trial = Path(args.tagger_model_dir) if args.tagger_model_dir else work / "train_chunk" / "models" / "chunk_model_1"
    if not args.tagger_model_dir and not trial.exists():
        trial = fine_tune(args.model_size, args.train_steps, work / "train_chunk", "chunk")
    (work / "tagger_dir.txt").write_text(str(trial.resolve()))
    if not (work / "hf_tagger").exists():
        subprocess.run([sys.executable, __file__, "--worker", "export_hf_tagger", "--model-dir", str(trial),
                        "--export", str(work / "hf_tagger")], cwd=REPO, check=True, env=worker_env())


def prepare(args, work: Path) -> Path:
    """`work`/saved_model, saved_model_bf16 and hf from the trial dir (fine-tuned here without
    --model-dir), each unless `work` (a kept --work-dir) holds it already; the tagger's with a
    token-classification variant."""
    variants = args.variants.split(",")
    if any(variant in TAGGERS for variant in variants):
        prepare_tagger(args, work)
    if all(variant in TAGGERS for variant in variants):
        return work
    trial = Path(args.model_dir) if args.model_dir else work / "train" / "models" / "sst_model_1"
    if not args.model_dir and not trial.exists():
        trial = fine_tune(args.model_size, args.train_steps, work / "train")
    for precision, directory in EXPORTS.items():
        if not (work / directory).exists():
            subprocess.run([sys.executable, "convert_checkpoint.py", "saved-model", "--model-dir", str(trial),
                            "--output-dir", str(work / directory), "--precision", precision],
                           cwd=REPO, check=True, env=worker_env())
    (work / "trial_dir.txt").write_text(str(trial.resolve()))  # for the ours_predict worker
    if not (work / "hf").exists():
        subprocess.run([sys.executable, __file__, "--worker", "export_hf", "--model-dir", str(trial),
                        "--export", str(work / "hf")], cwd=REPO, check=True, env=worker_env())
    for variant, directory in LITE_EXPORTS.items():
        if not (work / directory).exists() and variant in args.variants.split(","):
            subprocess.run([sys.executable, "convert_checkpoint.py", "litert", "--model-dir", str(trial), "--output-dir",
                            str(work / directory)] + (["--int8"] if variant.endswith("int8") else []),
                           cwd=REPO, check=True, env=worker_env())
    if not (work / "onnx").exists() and any(v.startswith("ort") for v in args.variants.split(",")):
        subprocess.run([sys.executable, __file__, "--worker", "export_onnx", "--export", str(work)],
                       cwd=REPO, check=True, env=worker_env())
    return work


# ----------------------------------------------------------------------------- workers

def build_ours(export: Path, precision: str):
    """predict(texts) -> [(label, its probability)], through the serving signature of the SavedModel
    exported in `precision`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (its WordPiece op)
    signature = tf.saved_model.load(str(export / EXPORTS[precision])).signatures["serving_default"]

    def predict(texts):
        out = signature(text_a=tf.constant(texts))
        return [(label.decode(), float(p)) for label, p in zip(out["label"].numpy(),
                                                               out["probabilities"].numpy().max(axis=-1))]

    return predict


def build_lite(export_dir: Path):
    """predict(texts) -> [(label, its probability)] through a LiteRT export (`finetune.litert`), its
    interpreter on `--intra-op-threads` threads (default 2)."""
    from finetune.litert import LiteServer
    server = LiteServer(export_dir, threads=int(os.environ.get("TF_NUM_INTRAOP_THREADS") or 2))

    def predict(texts):
        out = server(texts)
        return [(str(label), float(p)) for label, p in zip(out["label"], out["probabilities"].max(axis=-1))]

    return predict


def build_predict(trial_dir: Path):
    """predict(texts) -> [(label, its probability)] through predict.py's Predictor on the trial dir."""
    from finetune.glue import Example
    from finetune.predicting import Predictor
    predictor = Predictor(trial_dir)

    def predict(texts):
        rows = predictor.rows([(None, Example(i, text, None, None)) for i, text in enumerate(texts)])
        return [(row["label"], max(row["probabilities"].values())) for row in rows]

    return predict


def build_hf(export: Path):
    from transformers import pipeline
    classify = pipeline("text-classification", model=str(export / "hf"), device=-1)
    return lambda texts: [(answer["label"], answer["score"]) for answer in classify(
        texts, batch_size=len(texts), truncation=True, max_length=128)]


def build_tagger_predict(trial_dir: Path):
    """predict(sentences) -> [(each word not tagged O: its first character and tag, 0.0)] through
    predict.py's Predictor."""
    from finetune.predicting import Predictor
    from finetune.tagging import TextSentence
    predictor = Predictor(trial_dir)

    def predict(texts):
        sentences = [TextSentence.of_words(i, text.split(), text) for i, text in enumerate(texts)]
        rows = predictor.rows([(None, sentence) for sentence in sentences])
        return [(" ".join(f"{start}/{tag}" for (start, _), tag in zip(sentence.offsets, row["tags"])
                          if tag not in ("O", None)), 0.0) for sentence, row in zip(sentences, rows)]

    return predict


def build_hf_tagger(export: Path):
    """predict(sentences) -> [(each word not tagged O: its first character and tag, 0.0)], a word's
    tag being its first sub-token's."""
    from transformers import pipeline
    tag = pipeline("token-classification", model=str(export / "hf_tagger"), device=-1)

    def predict(texts):
        answers = tag(texts, batch_size=len(texts))
        first = lambda text, start: start == 0 or text[start - 1] == " "  # noqa: E731
        return [(" ".join(f"{a['start']}/{a['entity']}" for a in answer if first(text, a["start"])), 0.0)
                for text, answer in zip(texts, answers)]

    return predict


def serve_variant(args) -> None:
    """Worker: load, answer the first request (start-up), write the labels of the agreement rows,
    then one request of `--batch` dev sentences per step."""
    export = Path(args.export)
    texts = dev_sentences()
    if args.worker == "tagger_predict":
        predict, texts = build_tagger_predict(Path((export / "tagger_dir.txt").read_text())), held_out_sentences()
    elif args.worker == "hf_tagger":
        predict, texts = build_hf_tagger(export), held_out_sentences()
    elif args.worker == "ours_predict":
        predict = build_predict(Path((export / "trial_dir.txt").read_text()))
    elif args.worker in LITE_EXPORTS:
        predict = build_lite(export / LITE_EXPORTS[args.worker])
    elif args.worker.startswith("ours"):
        predict = build_ours(export, "mixed_bfloat16" if args.worker == "ours_bf16" else "float32")
    elif args.worker.startswith("ort"):
        predict = onnx_peer.build(export / "hf", export / "onnx", args.worker)
    else:
        predict = build_hf(export)
    predict(texts[:args.batch])
    labels = [label for start in range(0, AGREEMENT_ROWS, 32) for label in predict(texts[start:start + 32])]
    (export / f"labels_{args.worker}.json").write_text(json.dumps(labels))  # [[label, probability]]
    requests = [texts[(i * args.batch) % len(texts):][:args.batch] for i in range(len(texts))]
    serve(lambda i: predict(requests[i % len(requests)]), 0)


# ----------------------------------------------------------------------------- driver

def measure(work: Path, batch: int, steps: int, variants: list, pause_s: float, intra_op_threads: int = 0,
            base: str = "ours", turn: int = 1, settle_s: float = 0.0) -> list:
    """"ours" beside each peer: "hf", "hf_passive" (HF's OpenMP threads spin while they wait by default,
    which on a loaded machine costs them most of their time slices; see finetune_throughput.py) and
    "ours_no_onednn" (the same SavedModel with TF_ENABLE_ONEDNN_OPTS=0) and "ours_bf16" (the bf16 export).
    `intra_op_threads` > 0 sets our variants' intra-op threads (0: TensorFlow's default, one per core)."""
    def start(variant):
        extra = {"OMP_WAIT_POLICY": "PASSIVE"} if variant == "hf_passive" else {}
        if variant.startswith("ours") and intra_op_threads > 0:
            extra["TF_NUM_INTRAOP_THREADS"] = str(intra_op_threads)
        env = worker_env(onednn=variant != "ours_no_onednn", **extra)
        if variant.startswith("ours") and intra_op_threads <= 0:
            env.pop("TF_NUM_INTRAOP_THREADS", None)  # TensorFlow's default, whatever the shell set
        return Worker(__file__, variant, ["--export", str(work), "--batch", str(batch)], env)
    return run_groups(pair_groups(variants, base), start, steps, f"batch {batch}", gemm_peak=False, pause_s=pause_s,
                      turn=turn, settle_s=settle_s)


def report(work: Path, latency: list, throughput: list, base: str = "ours") -> None:
    """Per pair: each side's batch-1 p50 / p90 / p99, batch-32 examples/s, start-up and peak memory, and
    ours against the peer (the peer's p50 over ours; our throughput over the peer's). First, each
    peer's labels and probabilities on the agreement rows against ours."""
    ours = json.loads((work / f"labels_{base}.json").read_text())
    print()
    for peer in [one["variants"][1] for one in latency if len(one["variants"]) > 1]:
        theirs = json.loads((work / f"labels_{peer}.json").read_text())
        agree = sum(a[0] == b[0] for a, b in zip(ours, theirs))
        gap = max(abs(a[1] - b[1]) for a, b in zip(ours, theirs))
        print(f"{LABELS[peer]}: labels agree with ours on {agree} / {len(ours)} dev sentences; "
              f"largest probability difference {gap:.1e}")
    print(f"{'variant':24s} {'p50 ms':>7s} {'p90 ms':>7s} {'p99 ms':>7s} {'b32 ex/s':>9s} {'start s':>8s} "
          f"{'peak GB':>8s}")
    for one, many in zip(latency, throughput):
        rows = {}
        for variant in one["variants"][::-1]:
            p50, p90, p99 = (np.percentile(one["times"][variant], q) * 1e3 for q in (50, 90, 99))
            rate = 32 * len(many["times"][variant]) / sum(many["times"][variant])
            start = statistics.mean([one["ready_s"][variant], many["ready_s"][variant]])
            peak = max(one["peak_rss_gb"][variant], many["peak_rss_gb"][variant])
            rows[variant] = (p50, rate)
            label = f"  {base}, same rounds" if variant == base else LABELS[variant]
            print(f"{label:24s} {p50:7.1f} {p90:7.1f} {p99:7.1f} {rate:9.1f} {start:8.1f} {peak:8.2f}")
        if len(one["variants"]) < 2:  # a variant measured alone
            continue
        peer = one["variants"][1]
        print(f"  {base} vs {LABELS[peer]}: batch-1 p50 {rows[peer][0] / rows[base][0]:.2f}x lower; "
              f"batch-32 throughput {rows[base][1] / rows[peer][1]:.2f}x")


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__.split("\n")[0], ".venv/bin/python benchmarks/serving.py --work-dir /tmp/serving "
                           "--requests 200 --batches 20 --variants ours,hf,hf_passive")
    parser.add_argument("--model-dir", help="a fine-tuned SST-2 trial dir; default: fine-tune one here")
    parser.add_argument("--tagger-model-dir", help="a fine-tuned chunk (CoNLL-2000) trial dir, for the "
                        "token-classification pair; default: fine-tune one here")
    parser.add_argument("--model-size", default="small", choices=("tiny", "small", "base"),
                        help="ELECTRA size when fine-tuning here")
    parser.add_argument("--train-steps", type=int, default=100, help="steps when fine-tuning here")
    parser.add_argument("--work-dir", help="keep the exports here (default: a temporary dir)")
    parser.add_argument("--requests", type=int, default=200, help="batch-1 requests per variant")
    parser.add_argument("--batches", type=int, default=20, help="batch-32 requests per variant")
    parser.add_argument("--variants", default="ours,hf,hf_passive", help=f"a subset of {','.join(VARIANTS)}")
    parser.add_argument("--base", default="ours", choices=VARIANTS,
                        help="the variant every other one is paired with and compared to")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="idle seconds after every request, so that HF's spinning OpenMP threads park "
                             "before the other side's turn (0: back to back)")
    parser.add_argument("--turn", type=int, default=1,
                        help="requests a variant answers back to back per turn, after an untimed one "
                             "(1: the variants alternate every request, and ONNX Runtime's threads, which "
                             "spin after a request, take the cores from the request after theirs)")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="with --turn, idle seconds before each turn (not timed), so that the other "
                             "side's threads have stopped spinning (ONNX Runtime's spin for about 60 ms "
                             "after a request)")
    parser.add_argument("--intra-op-threads", type=int, default=0,
                        help="intra-op threads of our variants (0: TensorFlow's default, one per core; "
                             "LiteRT's interpreter: 2)")
    parser.add_argument("--quick", action="store_true", help="tiny model, 4 training steps, 10 + 2 requests")
    parser.add_argument("--worker", choices=VARIANTS + ("export_hf", "export_onnx", "export_hf_tagger"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.worker in ("export_hf", "export_hf_tagger"):
        write = write_hf_classifier if args.worker == "export_hf" else write_hf_tagger
        write(Path(args.model_dir), Path(args.export))
        return
    if args.worker == "export_onnx":
        onnx_peer.export(Path(args.export) / "hf", Path(args.export) / "onnx")
        return
    if args.worker:
        serve_variant(args)
        return
    if args.quick:
        args.model_size, args.train_steps, args.requests, args.batches = "tiny", 4, 10, 2
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.work_dir or scratch)
        prepare(args, work)
        threads = f"{args.intra_op_threads}" if args.intra_op_threads else "TensorFlow's default"
        print(f"{os.cpu_count()} CPUs; {args.requests} batch-1 and {args.batches} batch-32 requests per variant; "
              f"our intra-op threads: {threads}", flush=True)
        variants = args.variants.split(",")
        latency, throughput = (measure(work, batch, steps, variants, args.pause, args.intra_op_threads, args.base,
                                       args.turn, args.settle)
                               for batch, steps in ((1, args.requests), (32, args.batches)))
        report(work, latency, throughput, args.base)


if __name__ == "__main__":
    main()
