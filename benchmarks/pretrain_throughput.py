"""Pretraining step throughput on CPU: this project vs. Model Garden's ElectraPretrainer vs. HF PyTorch.

One ELECTRA-Small training step (discriminator hidden 256, 12 layers, 4 heads, FFN 1024, embedding 128;
generator hidden 64, 1 head, FFN 256, 12 layers; vocab 30522; seq 128; 19 predictions per row;
dropout 0.1) with an AdamW update and global-norm clipping at 1.0, for each variant:

- ours: `electra_tf` PretrainingModel + `make_train_step` (in-graph masking and Gumbel sampling,
  MLM head at the masked positions only, exact GELU, our AdamWeightDecay from `create_optimizer`),
  TF graph mode (tf.function), with the pooled CPU allocator that the run scripts turn on
  (`electra_tf.cli.use_pooled_cpu_allocator`) and the fused CPU kernels (attention, bias + GELU,
  bias + dropout + residual + LayerNorm); `ours_xla` is the same step with `jit_compile=True` (XLA,
  so TF's ops), `ours_unfused` the same step with TF's ops instead of the kernels
  (ELECTRA_TF_CPU_KERNELS=0).
- mg / mg_pooled / mg_no_onednn: Model Garden's `ElectraPretrainTask.train_step` on its `ElectraPretrainer`
  (BertEncoder, its default tanh GELU, MLM + 50 x RTD losses and its metrics), with its own
  `official.modeling.optimization` AdamW (the electra/pretraining experiment's settings), in
  TF's default oneDNN mode, with our pooled allocator setting too (TF_CPU_ALLOCATOR_USE_BFC=true)
  and with TF_ENABLE_ONEDNN_OPTS=0. Masking is done beforehand, as MG
  reads it from the input pipeline. (MG's trainer enables XLA on GPUs only, so not here.)
- hf: HF transformers `ElectraForMaskedLM` (generator) + `ElectraForPreTraining` (discriminator),
  embedding block shared and generator output layer tied to it, Gumbel sampling at the masked
  positions, loss = MLM + 50 x RTD, clip_grad_norm_(1.0), torch.optim.AdamW (eager PyTorch).
- hf_passive: the same with OMP_WAIT_POLICY=PASSIVE (PyTorch's OpenMP threads spin after each
  step by default, into the other side's turn and the GEMM measurement).

The machine is shared and its speed drifts, so every peer is measured beside "ours", in pairs:
each variant lives in its own long-lived subprocess (oneDNN is chosen when TF starts), and the
two of a pair are stepped in turn, round after round, each step followed by one GEMM
measurement, so both see the same load. Only the pair and the GEMM process are alive at a time
(a crowd of 2-9 GB processes on a 2-core, 24 GB machine slows the variants unequally). Warm-up
steps (tracing, compiling) are excluded; tokens/s is batch x 128 / the median step time, and
each peer's ratio is taken from its own pair. The GEMM peak is the best tf.matmul GFLOP/s
(1024^2 and 2048^2 matrices, both threads) over all rounds.

    .venv/bin/python benchmarks/pretrain_throughput.py [--batch-sizes 32 128] [--steps 3]
        [--warmup 2] [--variants ours,mg,mg_pooled,mg_no_onednn,hf] [--precision float32]

`--precision mixed_bfloat16` runs every variant in bfloat16 compute (tf_keras's mixed_bfloat16
policy for ours and Model Garden, torch.autocast for HF; ours then uses TensorFlow's ops, as the
CPU kernels are float32 only) and measures a bfloat16 GEMM peak (AMX / AVX512_BF16 machines).

Without `ours` among the variants, each runs alone and no ratio is printed.
"""

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.peers import (Shape, Worker, build_gemm, hf_config, mg_adamw, mg_encoder, pair_groups,  # noqa: E402
                              run_groups, serve, shim_pkg_resources, worker_env)
from electra_tf.cli import script_parser  # noqa: E402

SEQ, VOCAB, PREDICTIONS = 128, 30522, 19
DISC = dict(hidden=256, layers=12, heads=4, ffn=1024)
GEN = dict(hidden=64, layers=12, heads=1, ffn=256)
EMBEDDING = 128
SPECIAL_IDS = dict(cls_id=101, sep_id=102, mask_id=103)
VARIANTS = ("ours", "ours_xla", "ours_unfused", "mg", "mg_pooled", "mg_no_onednn", "hf", "hf_passive")
DEFAULT_VARIANTS = ("ours", "mg", "mg_pooled", "mg_no_onednn", "hf")
MG_VARIANTS = ("mg", "mg_pooled", "mg_no_onednn")
LABELS = {"ours": "ours (electra_tf, graph)", "ours_xla": "ours (electra_tf, XLA)",
          "ours_unfused": "ours, TF's ops (no CPU kernels)",
          "mg": "Model Garden, oneDNN on (default)", "mg_pooled": "Model Garden, oneDNN, pooled alloc.",
          "mg_no_onednn": "Model Garden, oneDNN off",
          "hf": "HF transformers PyTorch (eager)", "hf_passive": "HF, OMP_WAIT_POLICY=PASSIVE"}


# ----------------------------------------------------------------------------- FLOPs

def encoder_macs_per_token(hidden: int, layers: int, ffn: int) -> int:
    """Dense matmuls + attention of one encoder, per token: the E->H projection, and per layer
    Q/K/V/output (4 H^2), the FFN (2 H F), scores and context (2 L H)."""
    return EMBEDDING * hidden + layers * (4 * hidden * hidden + 2 * hidden * ffn + 2 * SEQ * hidden)


def training_flops_per_token() -> float:
    """3 x forward FLOPs (2 per MAC): generator and discriminator encoders, the MLM head at the
    19 masked positions only (dense Hg->E and the E x V output matmul, / 128 tokens), and the
    discriminator head (H x H + H x 1). Embedding lookups, LayerNorm, softmax, GELU, dropout,
    sampling, losses and the optimizer update are not counted."""
    generator = encoder_macs_per_token(GEN["hidden"], GEN["layers"], GEN["ffn"])
    mlm_head = PREDICTIONS / SEQ * (GEN["hidden"] * EMBEDDING + EMBEDDING * VOCAB)
    discriminator = encoder_macs_per_token(DISC["hidden"], DISC["layers"], DISC["ffn"])
    disc_head = DISC["hidden"] * DISC["hidden"] + DISC["hidden"]
    return 3 * 2 * (generator + mlm_head + discriminator + disc_head)


# ----------------------------------------------------------------------------- variants
# Each builder returns `run(i)`, which performs step i and blocks until it is done.

def _token_batch(batch: int):
    """Fixed synthetic rows: [CLS] random ids [SEP], no padding (numpy int32 [B, L] ids and mask)."""
    import numpy as np
    rng = np.random.RandomState(batch)
    ids = rng.randint(1000, VOCAB, size=(batch, SEQ)).astype(np.int32)
    ids[:, 0], ids[:, -1] = SPECIAL_IDS["cls_id"], SPECIAL_IDS["sep_id"]
    return ids, np.ones_like(ids)


def _masked_batch(batch: int) -> dict:
    """The batch masked once with this project's masking (for MG and HF, which mask outside the step).

    `mask_tokens`' default draw (with replacement) is the config default that "ours" masks with in
    its step, so all three train on masks drawn the same way."""
    import tensorflow as tf
    from electra_tf.objectives import mask_tokens
    ids, mask = _token_batch(batch)
    masked = mask_tokens(tf.constant(ids), tf.constant(mask), max_predictions_per_seq=PREDICTIONS,
                         seed=tf.constant([1, 2]), **SPECIAL_IDS)
    out = {k: v.numpy() for k, v in masked._asdict().items()}
    out.update(input_ids=ids, input_mask=mask)
    return out


def _shape(sizes: dict) -> Shape:
    return Shape(embedding=EMBEDDING, vocab=VOCAB, **sizes)


def _precision() -> str:
    """The run's --precision, as the driver passes it to its workers."""
    return os.environ.get("ELECTRA_BENCH_PRECISION", "float32")


def _set_keras_policy() -> None:
    import tf_keras
    tf_keras.mixed_precision.set_global_policy(_precision())


def build_ours(batch: int, jit_compile: bool = False):
    from electra_tf.cli import use_pooled_cpu_allocator
    use_pooled_cpu_allocator()  # as run_pretraining.py, before the first tensor
    import tensorflow as tf
    from electra_tf.config import PretrainingConfig
    from electra_tf.optimization import create_optimizer
    from electra_tf.pretraining import PretrainingModel
    from electra_tf.training import make_train_step

    _set_keras_policy()  # as run_pretraining.py, before the model is built
    config = PretrainingConfig.from_hparams("bench", "/unused", dict(
        model_size="small", train_batch_size=batch, max_seq_length=SEQ, vocab_size=VOCAB,
        precision=_precision()))
    assert config.max_predictions_per_seq == PREDICTIONS
    model = PretrainingModel(config, **SPECIAL_IDS)
    optimizer = create_optimizer(config.learning_rate, config.num_train_steps,
                                 config.weight_decay_rate, config.num_warmup_steps)
    optimizer.iterations.assign(config.num_warmup_steps)  # past warm-up: a non-zero LR
    step = tf.function(make_train_step(model, optimizer, jit_compile=jit_compile))
    ids, mask = _token_batch(batch)
    features = dict(input_ids=tf.constant(ids), input_mask=tf.constant(mask), segment_ids=tf.zeros_like(ids))
    return lambda i: step(features, tf.constant([0, i])).numpy()


def build_mg(batch: int):
    import tensorflow as tf
    shim_pkg_resources()
    from official.nlp.configs import electra
    from official.nlp.data import pretrain_dataloader
    from official.nlp.tasks import electra_task

    task = electra_task.ElectraPretrainTask(electra_task.ElectraPretrainConfig(
        model=electra.ElectraPretrainerConfig(
            generator_encoder=mg_encoder(_shape(GEN)), discriminator_encoder=mg_encoder(_shape(DISC)),
            num_masked_tokens=PREDICTIONS, sequence_length=SEQ, cls_heads=[]),
        train_data=pretrain_dataloader.BertPretrainDataConfig(
            seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, use_next_sentence_label=False)))
    _set_keras_policy()
    model, metrics = task.build_model(), task.build_metrics(training=True)
    # The electra/pretraining experiment's optimizer: AdamW, wd 0.01, 10k warm-up steps of 1M (done).
    optimizer = mg_adamw(5e-4, 1000000, 10000, 0.01, iterations=10000)
    m = _masked_batch(batch)
    inputs = {name: tf.constant(value) for name, value in dict(
        input_word_ids=m["masked_input_ids"], input_mask=m["input_mask"],
        input_type_ids=0 * m["input_ids"], masked_lm_positions=m["masked_lm_positions"],
        masked_lm_ids=m["masked_lm_ids"], masked_lm_weights=m["masked_lm_weights"]).items()}
    step = tf.function(lambda x: task.train_step(x, model, optimizer, metrics)[task.loss])
    return lambda i: step(inputs).numpy()


def build_hf(batch: int):
    import torch
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    torch.manual_seed(0)
    generator = ElectraForMaskedLM(hf_config(_shape(GEN)))
    discriminator = ElectraForPreTraining(hf_config(_shape(DISC)))
    generator.electra.embeddings = discriminator.electra.embeddings  # ELECTRA's shared embedding block
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    params = {id(p): (n, p) for model in (discriminator, generator) for n, p in model.named_parameters()}
    no_decay = [p for n, p in params.values() if "LayerNorm" in n or "bias" in n]
    decay = [p for n, p in params.values() if not ("LayerNorm" in n or "bias" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=5e-4, eps=1e-6)
    m = {k: torch.from_numpy(v) for k, v in _masked_batch(batch).items()}
    positions = m["masked_lm_positions"].long()  # [B, N]; unused slots point at 0
    used = m["masked_lm_weights"] > 0
    labels = torch.full_like(m["input_ids"], -100, dtype=torch.long)  # MLM targets at masked positions
    labels.scatter_(1, positions, torch.where(used, m["masked_lm_ids"].long(), -100))
    ids, mask, masked_ids = m["input_ids"].long(), m["input_mask"].long(), m["masked_input_ids"].long()
    generator.train(), discriminator.train()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=_precision() == "mixed_bfloat16")

    def run(i):
        with autocast:
            gen_out = generator(input_ids=masked_ids, attention_mask=mask, labels=labels)
        with torch.no_grad():  # Gumbel-max samples at the masked positions, as the original
            logits = torch.gather(gen_out.logits, 1, positions[..., None].expand(-1, -1, VOCAB))
            uniform = torch.rand(logits.shape)
            sampled = torch.argmax(logits - torch.log(-torch.log(uniform + 1e-9) + 1e-9), -1)
            fake = ids.scatter(1, positions, torch.where(used, sampled, ids.gather(1, positions)))
            is_replaced = (fake != ids).long()
        with autocast:
            disc_out = discriminator(input_ids=fake, attention_mask=mask, labels=is_replaced)
        loss = gen_out.loss.float() + 50.0 * disc_out.loss.float()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params.values()], 1.0)
        optimizer.step()
        return loss.item()

    return run


BUILDERS = {"gemm": lambda b: build_gemm(_precision() == "mixed_bfloat16"), "ours": build_ours,
            "ours_xla": lambda b: build_ours(b, jit_compile=True),
            "ours_unfused": build_ours,
            "mg": build_mg, "mg_pooled": build_mg, "mg_no_onednn": build_mg, "hf": build_hf,
            "hf_passive": build_hf}


def _worker(variant: str, batch: int, warmup: int, precision: str) -> Worker:
    """A variant's process; TF's default allocator except mg_pooled and ours (build_ours sets it
    itself, as the run scripts do)."""
    extra = {"ELECTRA_BENCH_PRECISION": precision}
    if variant == "ours_unfused":
        extra["ELECTRA_TF_CPU_KERNELS"] = "0"
    if variant == "hf_passive":  # PyTorch's OpenMP threads otherwise spin into the other side's turn
        extra["OMP_WAIT_POLICY"] = "PASSIVE"
    env = worker_env(onednn=variant != "mg_no_onednn", pooled_allocator=variant == "mg_pooled", **extra)
    return Worker(__file__, variant, ["--batch-sizes", str(batch), "--warmup", str(warmup)], env)


def measure(batch: int, variants, args) -> list:
    """`peers.run_groups` at this batch size: ("ours", peer) pairs, or each variant alone without "ours"."""
    return run_groups(pair_groups(variants), lambda v: _worker(v, batch, 0 if v == "gemm" else args.warmup,
                                                                 args.precision), args.steps, f"batch {batch}")


def report(results: dict, batch_sizes, precision: str = "float32") -> None:
    """The table (one row per variant and group, "ours" once per pair) and the ratios: each
    peer's from its own pair; "best Model Garden" is the smallest ratio over the MG variants."""
    if not any(results.values()):
        print("\nNo group completed: nothing to report.")
        return
    flops = training_flops_per_token()
    gemm = max(max(entry["gemm"]) for batch in batch_sizes for entry in results[batch])
    print(f"\nModel FLOPs per trained token: {flops / 1e6:.1f} MFLOP = 3 (fwd + bwd) x 2 x MACs of: generator and "
          f"discriminator encoders (E->H projection; per layer 4H^2 + 2HF + 2LH), MLM head at the "
          f"{PREDICTIONS}/{SEQ} masked positions (Hg*E + E*V), discriminator head (H^2 + H).")
    dtype = "bf16" if precision == "mixed_bfloat16" else "fp32"
    print(f"{dtype} GEMM peak (best tf.matmul over all rounds): {gemm:.1f} GFLOP/s; "
          f"MFU = tokens/s x FLOPs/token / peak.\n")
    print(f"{'variant':36s} {'batch':>5s} {'step s':>7s} {'tokens/s':>9s} {'GFLOP/s':>8s} {'MFU':>6s}  "
          f"{'ratio':>6s}  timed steps (s)")
    for batch in batch_sizes:
        ratios = {}  # peer -> ours / peer, within their pair
        for entry in results[batch]:
            rates = {v: batch * SEQ / statistics.median(t) for v, t in entry["times"].items()}
            for variant in entry["variants"][::-1]:  # the peer first, then ours beside it
                times = entry["times"][variant]
                ratio = ""
                if variant != "ours" and "ours" in rates:
                    ratios[variant] = rates["ours"] / rates[variant]
                    ratio = f"{ratios[variant]:5.2f}x"
                label = "  ours, same rounds" if variant == "ours" and len(rates) > 1 else LABELS[variant]
                print(f"{label:36s} {batch:5d} {statistics.median(times):7.2f} {rates[variant]:9.0f} "
                      f"{rates[variant] * flops / 1e9:8.1f} {rates[variant] * flops / 1e9 / gemm:6.1%}  {ratio:>6s}  "
                      f"{' '.join(f'{t:.2f}' for t in times)}")
        summary = [f"batch {batch}: {LABELS['ours']}"]
        mg = [v for v in MG_VARIANTS if v in ratios]
        if mg:
            closest = min(mg, key=ratios.get)
            summary.append(f"/ best Model Garden = {ratios[closest]:.2f}x ({LABELS[closest]})")
        for variant in ("hf", "hf_passive"):
            if variant in ratios:
                summary.append(f"/ {LABELS[variant]} = {ratios[variant]:.2f}x")
        for variant in ("ours_xla", "ours_unfused"):
            if variant in ratios:
                summary.append(f"/ {LABELS[variant]} = {ratios[variant]:.2f}x")
        if len(summary) > 1:
            print("  ".join(summary))


def build_parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__.split("\n")[0], ".venv/bin/python benchmarks/pretrain_throughput.py "
                           "--batch-sizes 32 --steps 8 --variants ours,mg,mg_pooled,ours_unfused,hf")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128], help="one group per batch size")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (rounds) of each group")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (tracing, compiling)")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32",
                        help="compute dtype of every variant (and of the GEMM peak)")
    parser.add_argument("--worker", choices=tuple(BUILDERS), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.worker:
        serve(BUILDERS[args.worker](args.batch_sizes[0]), args.warmup, answer_value=args.worker == "gemm")
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    if {"hf", "hf_passive"} & set(variants):
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError:
            print("torch / transformers not importable: skipping the HF variants")
            variants = [v for v in variants if v not in ("hf", "hf_passive")]
    print(f"{os.cpu_count()} CPUs; batch sizes {args.batch_sizes}, seq {SEQ}; {args.warmup} warm-up + "
          f"{args.steps} timed steps per group; variants: {', '.join(variants)}; {args.precision}", flush=True)
    results = {batch: measure(batch, variants, args) for batch in args.batch_sizes}
    report(results, args.batch_sizes, args.precision)


if __name__ == "__main__":
    main()
