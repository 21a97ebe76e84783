"""Fine-tuning step throughput on CPU: this project vs. HF PyTorch vs. Model Garden (issue #19).

One training step on real rows of the task's train file, featurized by this project (same token
ids for every variant), in length-bucketed batches padded to their longest row (dynamic padding),
the same batch sequence for every variant, with the paper's recipe (ELECTRA-Small: lr 3e-4;
Base: lr 1e-4; no weight decay; batch 32; 10 % warm-up, linear decay, clip 1.0):

- ours: `finetune.runner.Trial.compile_train_step` (what run_finetuning.py trains with: the original's
  AdamW with layer-wise LR decay, one tf.function for any batch shape), the pooled CPU allocator and
  the fused CPU kernels; `ours_unfused` the same with TF's ops (ELECTRA_TF_CPU_KERNELS=0),
  `ours_no_onednn` the same with TF_ENABLE_ONEDNN_OPTS=0 (Eigen's matmuls instead of oneDNN's).
- hf: HF transformers `ElectraForSequenceClassification` (SQuAD: `ElectraForQuestionAnswering`) of
  the same shape, a plain eager PyTorch loop: forward with labels, backward, clip_grad_norm_(1.0),
  torch.optim.AdamW, a linear warm-up/decay LambdaLR. (HF's classifier head has one more H x H dense
  than the original's; its cost is one [B, H] x [H, H] matmul.)
- hf_passive: the same with OMP_WAIT_POLICY=PASSIVE: on a loaded machine PyTorch's OpenMP threads,
  which spin while they wait by default, lose most of their time slices (5-10x slower steps seen
  here with other processes running), so the fair HF figure is the faster of the two.
- mg: Model Garden's `SentencePredictionTask` (SQuAD: `QuestionAnsweringTask`) `train_step` on a
  BertEncoder of the same shape with its own AdamW (`peers.mg_adamw`), in one tf.function whose
  input signature allows any batch shape (so the same dynamically padded batches, no retracing).

Tasks: sst (SST-2, single sentences), mrpc (MRPC, sentence pairs), squadv1 (SQuAD 1.1 at 384 tokens,
doc stride 128, from shared/data/squad's train subset). Peers are stepped in pairs beside "ours"
(`benchmarks.peers`); examples/s = batch x timed steps / their summed seconds, and each peer's
ratio is its summed seconds over ours in the same rounds (min/median/max of the per-step ratios too).

    .venv/bin/python benchmarks/finetune_throughput.py [--model-size small] [--tasks sst mrpc]
        [--steps 20] [--warmup 3] [--variants ours,hf,mg] [--precision float32] [--quick]

`--quick`: batch 8, 1 warm-up and 2 timed steps on sst (a smoke run of the whole machinery).
`--precision mixed_bfloat16`: tf_keras's mixed_bfloat16 policy for ours and Model Garden,
torch.autocast(bfloat16) for HF; ours then runs TensorFlow's ops (the CPU kernels are float32 only).
`--precision mixed_float16`: the same with float16 (ours with dynamic loss scaling, as run_finetuning.py;
Model Garden's step without loss scaling).
"""

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from electra_tf.cli import script_parser  # noqa: E402
from benchmarks.peers import (SHARED_DATA as SHARED, Shape, Worker, build_gemm, hf_config,  # noqa: E402
                              mg_adamw, mg_encoder, pair_groups, run_groups, serve, shim_pkg_resources,
                              worker_env)

TASKS = ("sst", "mrpc", "squadv1")
SQUAD_TRAIN = SHARED / "squad" / "train-v1.1-subset-44articles.json"
SQUAD_SEQ = 384
VARIANTS = ("ours", "ours_unfused", "ours_no_onednn", "hf", "hf_passive", "mg")
LABELS = {"ours": "ours (electra_tf, graph)", "ours_unfused": "ours, TF's ops (no CPU kernels)",
          "ours_no_onednn": "ours, oneDNN off",
          "hf": "HF transformers PyTorch (eager)", "hf_passive": "HF, OMP_WAIT_POLICY=PASSIVE",
          "mg": "Model Garden (oneDNN on)"}
BUCKET_ROWS = 50  # rows read = batch x this many batches at least (finetune.inputs' bucket size)


# ----------------------------------------------------------------------------- the batches

def finetuning_setup(task: str, model_size: str, batch: int, rows: int, scratch: str):
    """(FinetuningConfig, TaskData) of the paper's recipe on `rows` training rows, random weights."""
    from finetune.config import FinetuningConfig
    from finetune.task_data import load_task_data, make_tokenizer
    hparams = dict(task_names=[task], model_size=model_size, recipe="paper", random_init=True, do_eval=False,
                   vocab_file=str(SHARED / "vocab" / "vocab.txt"), train_batch_size=batch, max_examples=rows,
                   raw_data_dir=str(SHARED / "glue"))
    if task == "squadv1":  # finetuning_data/squadv1/train.json, the original's layout
        os.makedirs(os.path.join(scratch, task))
        os.symlink(SQUAD_TRAIN, os.path.join(scratch, task, "train.json"))
        # the windows that hold the answer, as every figure in RESULTS.md was measured
        hparams.update(raw_data_dir=scratch, max_seq_length=SQUAD_SEQ, drop_windows_without_answer=True)
    config = FinetuningConfig.from_hparams("bench", scratch, hparams)
    return config, load_task_data(config, make_tokenizer(config))


def make_batches(config, data, count: int) -> list:
    """`count` full training batches (numpy dicts; examples/s counts batch x steps), dynamically
    padded and length-bucketed, seed 0."""
    import numpy as np
    from finetune.inputs import train_batches
    return list(train_batches(data.train, config.train_batch_size, count, np.random.default_rng(0), True,
                              config.max_seq_length, data.train_batch, keep_partial=False))


def encoder_shape(config) -> Shape:
    encoder = config.encoder_config()
    return Shape(encoder.hidden_size, encoder.num_hidden_layers, encoder.num_attention_heads,
                 encoder.intermediate_size, encoder.embedding_size, encoder.vocab_size)


def recipe_steps(config, data) -> int:
    """Steps of the full recipe on the rows read (sets the LR schedules; the speed does not depend on it)."""
    return max(1, int(len(data.train) // config.train_batch_size * config.num_train_epochs))


# ----------------------------------------------------------------------------- variants
# Each builder takes (config, data, batches, precision) and returns run(i), which performs step i
# on batches[i] and blocks until it is done.

def build_ours(config, data, batches, precision):
    import tensorflow as tf
    from finetune.runner import Trial
    trial = Trial(dataclasses.replace(config, precision=precision), data, 1, None)  # as run_finetuning.py's hparam
    step = trial.compile_train_step(recipe_steps(config, data))
    feeds = [{k: tf.constant(v) for k, v in batch.items()} for batch in batches]
    return lambda i: float(step(feeds[i]))


def build_hf(config, data, batches, precision):
    import torch
    from transformers import ElectraForQuestionAnswering, ElectraForSequenceClassification
    torch.manual_seed(0)
    shape = encoder_shape(config)
    squad = config.task_names[0] == "squadv1"
    model = ElectraForQuestionAnswering(hf_config(shape)) if squad else \
        ElectraForSequenceClassification(hf_config(shape, num_labels=2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, eps=1e-6,
                                  weight_decay=config.weight_decay_rate)
    total = recipe_steps(config, data)
    warmup = max(1, int(total * config.warmup_proportion))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    labels = ("start_positions", "end_positions") if squad else ("label_ids",)
    feeds = [dict(input_ids=torch.from_numpy(b["input_ids"]).long(),
                  attention_mask=torch.from_numpy(b["input_mask"]).long(),
                  token_type_ids=torch.from_numpy(b["segment_ids"]).long(),
                  **{("labels" if k == "label_ids" else k): torch.from_numpy(b[k]).long() for k in labels})
             for b in batches]
    model.train()
    half = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}
    autocast = torch.autocast("cpu", dtype=half.get(precision, torch.bfloat16), enabled=precision in half)

    def run(i):
        with autocast:
            loss = model(**feeds[i]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        return loss.item()

    return run


def build_mg(config, data, batches, precision):
    import tensorflow as tf
    from electra_tf.training.distribution import set_precision
    shim_pkg_resources()
    from official.nlp.data.question_answering_dataloader import QADataConfig
    from official.nlp.tasks import question_answering, sentence_prediction
    encoder = mg_encoder(encoder_shape(config))
    if config.task_names[0] == "squadv1":  # (the task reads its tokenizer choice from validation_data)
        task = question_answering.QuestionAnsweringTask(question_answering.QuestionAnsweringConfig(
            model=question_answering.ModelConfig(encoder=encoder), validation_data=QADataConfig()))
        labels = {"start_positions": "start_positions", "end_positions": "end_positions"}
    else:
        task = sentence_prediction.SentencePredictionTask(sentence_prediction.SentencePredictionConfig(
            model=sentence_prediction.ModelConfig(num_classes=2, encoder=encoder)))
        labels = {"label_ids": "label_ids"}
    set_precision(precision)  # the policy (and for float16 on CPU, grappler's remapper off), as ours
    model, metrics = task.build_model(), task.build_metrics(training=True)
    total = recipe_steps(config, data)
    optimizer = mg_adamw(config.learning_rate, total, max(1, int(total * config.warmup_proportion)),
                         config.weight_decay_rate, iterations=0)
    names = dict(input_word_ids="input_ids", input_mask="input_mask", input_type_ids="segment_ids", **labels)
    feeds = [{mg: tf.constant(b[ours]) for mg, ours in names.items()} for b in batches]
    signature = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in feeds[0].items()}
    step = tf.function(lambda x: task.train_step(x, model, optimizer, metrics)[task.loss],
                       input_signature=[signature])
    return lambda i: float(step(feeds[i]))


BUILDERS = {"ours": build_ours, "ours_unfused": build_ours, "ours_no_onednn": build_ours, "hf": build_hf,
            "hf_passive": build_hf, "mg": build_mg}


def serve_variant(args) -> None:
    """Worker: build the variant on the run's batches and answer the driver's steps."""
    if args.worker == "gemm":
        serve(build_gemm(args.precision == "mixed_bfloat16"), 0, answer_value=True)
        return
    if args.worker.startswith("ours"):
        from electra_tf.cli import use_pooled_cpu_allocator
        use_pooled_cpu_allocator()  # as run_finetuning.py, before the first tensor
    with tempfile.TemporaryDirectory() as scratch:
        count = args.warmup + args.steps
        config, data = finetuning_setup(args.task, args.model_size, args.batch, args.rows, scratch)
        run = BUILDERS[args.worker](config, data, make_batches(config, data, count), args.precision)
    serve(run, args.warmup)


# ----------------------------------------------------------------------------- driver

def pair_ratios(times: dict, peer: str) -> dict:
    """The peer's seconds over ours: in all (summed over the rounds) and per step (min/median/max)."""
    per_step = [p / o for p, o in zip(times[peer], times["ours"])]
    return {"total": sum(times[peer]) / sum(times["ours"]), "min": min(per_step),
            "median": statistics.median(per_step), "max": max(per_step)}


def report(task: str, results: list, batch: int, mean_length: float) -> None:
    """One row per variant of each group ("ours" beside each peer), and the ratios."""
    if not results:
        print(f"\n{task}: no group completed")
        return
    gemm = max(max(entry["gemm"]) for entry in results)
    print(f"\n{task}: batch {batch}, mean padded length {mean_length:.1f}; GEMM peak {gemm:.0f} GFLOP/s")
    print(f"{'variant':36s} {'ex/s':>7s} {'peak GB':>7s}  {'ours x':>7s} {'(min/med/max per step)':>22s}  "
          "timed steps (s)")
    summary = []
    for entry in results:
        times = entry["times"]
        for variant in entry["variants"][::-1]:  # the peer first, then ours beside it
            rate = batch * len(times[variant]) / sum(times[variant])
            ratio = spread = ""
            if variant != "ours" and "ours" in times:
                r = pair_ratios(times, variant)
                ratio, spread = f"{r['total']:6.2f}x", f"{r['min']:.2f} / {r['median']:.2f} / {r['max']:.2f}"
                summary.append(f"{LABELS[variant]} = {r['total']:.2f}x")
            label = "  ours, same rounds" if variant == "ours" and len(times) > 1 else LABELS[variant]
            print(f"{label:36s} {rate:7.1f} {entry['peak_rss_gb'][variant]:7.2f}  {ratio:>7s} {spread:>22s}  "
                  f"{' '.join(f'{t:.2f}' for t in times[variant])}")
    if summary:
        print(f"{task}: {LABELS['ours']} / " + " / ".join(summary))


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__.split("\n")[0], ".venv/bin/python benchmarks/finetune_throughput.py "
                           "--model-size small --tasks mrpc sst --steps 10 --warmup 3 --variants ours,hf,hf_passive,mg")
    parser.add_argument("--model-size", default="small", choices=("tiny", "small", "base"), help="ELECTRA size")
    parser.add_argument("--tasks", nargs="+", default=["sst", "mrpc"], choices=TASKS, help="one group per task")
    parser.add_argument("--batch", type=int, default=32, help="examples per step")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (rounds) of each group")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing)")
    parser.add_argument("--variants", default="ours,hf,hf_passive,mg",
                        help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--precision", choices=("float32", "mixed_bfloat16", "mixed_float16"), default="float32",
                        help="compute dtype of every variant")
    parser.add_argument("--quick", action="store_true", help="batch 8, 1 warm-up + 2 timed steps, sst only")
    parser.add_argument("--worker", choices=("gemm",) + VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--task", choices=TASKS, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.worker:
        serve_variant(args)
        return
    if args.quick:
        args.batch, args.warmup, args.steps, args.tasks = 8, 1, 2, ["sst"]
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    rows = args.batch * max(BUCKET_ROWS, args.warmup + args.steps)
    print(f"{os.cpu_count()} CPUs; ELECTRA-{args.model_size}, batch {args.batch}; {args.warmup} warm-up + "
          f"{args.steps} timed steps per group; variants: {', '.join(variants)}; {args.precision}", flush=True)
    for task in args.tasks:
        def start(variant, task=task):
            extra = {"ours_unfused": {"ELECTRA_TF_CPU_KERNELS": "0"},
                     "hf_passive": {"OMP_WAIT_POLICY": "PASSIVE"}}.get(variant, {})
            onednn = variant != "ours_no_onednn"
            worker_args = ["--task", task, "--model-size", args.model_size, "--batch", str(args.batch),
                           "--warmup", str(args.warmup), "--steps", str(args.steps), "--rows", str(rows),
                           "--precision", args.precision]
            return Worker(__file__, variant, worker_args, worker_env(onednn, **extra))

        with tempfile.TemporaryDirectory() as scratch:
            config, data = finetuning_setup(task, args.model_size, args.batch, rows, scratch)
            timed = make_batches(config, data, args.warmup + args.steps)[args.warmup:]
        mean_length = statistics.mean(b["input_ids"].shape[1] for b in timed)
        report(task, run_groups(pair_groups(variants), start, args.steps, task), args.batch, mean_length)


if __name__ == "__main__":
    main()
