"""The pre-registered plan of `experiments/electra_vs_mlm/replicate_paper.py` (issue #17), fixed before any result.

Question: at equal pretraining FLOPs, does ELECTRA's replaced token detection give a better
encoder than BERT's masked language modelling on this CPU machine (paper Table 5 and Figure 4)?

Data. The 80 files of `shared/data/corpus` (English Wikipedia, WikiExtractor format): the last
3 files (wiki_77-79, ~3 MB, whole articles) are held out for pretraining evaluation, the other
77 are the training split. The learned WordPiece vocab (8,192 tokens at most) is learned on
the training split only. Sequences of 128 tokens, the original's packing.

Architecture (every stage): discriminator hidden 256, 4 layers, 4 heads, FFN 1024, embedding
128 (`small` with `num_hidden_layers` 4); generator 1/4 of the width (hidden 64, 1 head, FFN 256,
4 layers), embeddings tied, as ELECTRA-Small's. Batch 128, warm-up 6 % of the steps, linear
decay, AdamW as the original, masking as the original (15 %, 85 % of them [MASK]) except that
the masked positions are drawn without replacement (`mask_with_replacement: false`, pinned in
every run's hparams: the package's default when this plan was fixed, kept so all runs match).

Stage 1, the regime (go/no-go), every pilot with objective `bert` (MLM only):
  (a) the learned 8,192-token vocab, lr 1e-3 (MLM is stable there for small models; the
      pilot's collapse at 1e-3 was the discriminator's), 2 CPU hours;
  (b) BERT's 30,522-token vocab (the paper's), lr 5e-4 (the paper's for Small), 2 CPU hours;
      run only if (a) does not transfer;
  (c) the better of (a) and (b) (larger mean gain over random init at the final checkpoint)
      for 6 CPU hours; run only if neither transfers.
  Hours become steps through the step's tokens/s, measured first at each vocab (a short timed
  run of `bert` at batch 128: the `throughput` units, whose result files fix the steps; results.json
  lists them).
  Checkpoints at 25 / 50 / 100 % of a pilot's steps; each is evaluated on the held-out data
  (MLM accuracy) and fine-tuned on SST-2 (a fixed random subsample of 8,000 training examples,
  seed 0; full dev) and MRPC (full), seeds 1, 2, 3, with the paper's recipe for Small
  (Table 7: lr 3e-4, weight decay 0, layer-wise decay 0.8, 3 epochs, batch 32), against the
  same architecture from random weights with the same seeds and the same vocab.
  Decision rule: a pilot "transfers" when at its final checkpoint the median over the seeds
  beats random init's median on SST-2 (accuracy) AND on MRPC (mean of accuracy and F1, as GLUE),
  and their mean gain is at least 1.0 point. The first pilot that transfers fixes the regime
  (vocab, lr) for stages 2 and 3. If none does, stage 2 does not start; the report gives what
  was measured and the extrapolation.

Stage 2, the headline: `electra` and `bert` at the regime with the same training FLOPs, counted
by the paper's accounting (`flops.py`, the generator included), so `bert` takes more steps. The
budget: H2 = min(6, (30 - S1 - F2) / 2) CPU hours of the `electra` step (its tokens/s measured by
a short timed run), where S1 is stage 1's measured hours and F2 the estimated hours of stage 2's
fine-tuning (1.2 x its example-passes x stage 1's measured seconds per example-pass). Checkpoints
at 25 / 50 / 75 / 100 % of each run (equal FLOPs fractions across the two), each evaluated on the
held-out data and fine-tuned on the GLUE dev sets CoLA (MCC), SST-2 (accuracy; the same 8,000
subsample), MRPC (accuracy/F1 mean), STS-B (Pearson/Spearman mean), RTE (accuracy), seeds 1, 2, 3,
the paper's recipe (RTE and STS-B 10 epochs); the median over seeds is reported, and the GLUE
average is the mean of the five medians. Random init of the same architecture is the baseline.
The final discriminators are exported to HF format in float16.
Stage 2's reading, added on 2026-11-27 before the last of `bert`'s stage-2 trials and all of
random init's had run: a model *transfers* when its final GLUE average is at
least `transfer_margin` above random init's (stage 4's rule). If neither does, no pretrained model
beats random init at the cap, and the report gives, as stage 1 would, each run's straight line of
its GLUE-average gain over its checkpoints in log10 FLOPs, where it would reach the margin, and
the command and estimated time for one GPU.

Stage 3, the ablations: `electra_15`, `replace_mlm`, `all_tokens_mlm` at stage 2's FLOPs when
3 x H2 + their fine-tuning fit in what is left of the 30-hour cap after stages 1-2 (measured);
otherwise all five objectives at the common budget H3 = (left - F3) / 5 hours, labelled as a
substitute; below 0.5 h each, stage 3 is not run and the report says so. Final checkpoints are
fine-tuned as in stage 2; every checkpoint is evaluated.

Stage 4, diagnostics, added on 2026-11-27 after stage 2's `electra` had stayed near the prior
(REPORT.md, "Next diagnostics, fixed before they run", is their pre-registration, written before
any of them ran). Outside the plan above and its cap: three `electra` runs at the regime, each
with one setting changed, and a fourth fixed on 2026-11-29, the first with Adam's bias correction
too (`DIAGNOSTICS`); each evaluated at 25 / 50 / 75 / 100 % and its final discriminator
fine-tuned as in stage 2, against stage 2's models and random init. Reading: a run
*learns* when its final held-out discriminator loss is at least LEARNS_MARGIN nats below the
constant predictor's, and *transfers* when its GLUE average is at least `transfer_margin` above
random init's.

Nothing here changes after a result exists: seeds, tasks, metrics, the SST-2 subsample, the
decision rule and the budget formulas are fixed; only measured speeds enter the budgets.
`--quick` runs the same pipeline on tiny settings (`QUICK`) in minutes; its numbers mean nothing.
"""

import dataclasses
from typing import Optional, Tuple

OBJECTIVES_STAGE2 = ("electra", "bert")
OBJECTIVES_STAGE3 = ("electra_15", "replace_mlm", "all_tokens_mlm")
LEARNS_MARGIN = 0.005  # nats below the constant predictor's held-out loss (stage 4's reading)


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """A stage-4 run: `electra` at the regime with the settings in `hparams` / `learning_rate` changed."""

    name: str
    hparams: Tuple[Tuple[str, object], ...] = ()  # PretrainingConfig values that differ from stage 2's
    learning_rate: Optional[float] = None  # None: the regime's
    flops_matched: bool = False  # stage 2's FLOPs at this step's cost, rather than `electra`'s steps


# In the order they run (REPORT.md, 2026-11-27): the released Small's generator width, the
# generator with its own embeddings, the original's learning rate for Small; then (REPORT.md, "Next,
# fixed 2026-11-29 before it runs") the first with Adam's bias correction, which the original lacks.
DIAGNOSTICS = (Diagnostic("full_generator", (("generator_hidden_size", 1.0),), flops_matched=True),
               Diagnostic("untied_embeddings", (("untied_generator_embeddings", True),)),
               Diagnostic("lr_5e-4", learning_rate=5e-4),
               Diagnostic("full_generator_bias_corrected", (("generator_hidden_size", 1.0),
                                                            ("adam_bias_correction", True)), flops_matched=True))


@dataclasses.dataclass(frozen=True)
class Pilot:
    name: str
    vocab: str  # "learned" or "bert"
    learning_rate: float
    hours: float


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the real run and `--quick` set differently."""

    corpus_files: Optional[int]  # training files taken from the corpus (None: all but the held-out)
    held_out_files: int
    learned_vocab_size: int
    vocab_max_lines: Optional[int]  # corpus lines the vocab is learned from (None: all; quick: a sample)
    hidden: int  # discriminator architecture, also for the FLOPs accounting
    layers: int
    embedding: int
    generator_hidden: int
    model_size: str  # PretrainingConfig / FinetuningConfig preset whose width this is
    batch: int
    seq: int
    warmup_fraction: float
    seeds: Tuple[int, ...]
    probe_tasks: Tuple[str, ...]  # stage 1
    glue_tasks: Tuple[str, ...]  # stages 2 and 3
    sst_subsample: int
    max_examples: Optional[int]  # rows read per train/dev file (quick only)
    pilots: Tuple[Pilot, ...]
    pilot_c_hours: float
    pilot_fractions: Tuple[float, ...]
    stage_fractions: Tuple[float, ...]
    transfer_margin: float
    stage2_max_hours: float
    cap_hours: float
    min_stage3_hours: float
    throughput_steps: int
    checkpoints_per_hour: int  # pretraining checkpoints (what a kill can lose)
    diagnostics: Tuple[Diagnostic, ...] = ()  # stage 4
    workers: int = 1  # processes running ready units at once (batching.LANE_KINDS; the real run: one, on both cores)
    fixed_steps: Optional[int] = None  # quick: every run takes this many steps
    eval_batches: int = 10 ** 6  # held-out batches per checkpoint evaluation (the real run: all of them)
    quick: bool = False

    @property
    def model_hparams(self) -> dict:
        """The architecture as PretrainingConfig / FinetuningConfig hparams."""
        return {"model_size": self.model_size, "model_hparam_overrides": {"num_hidden_layers": self.layers}}


REAL = Settings(
    corpus_files=None, held_out_files=3, learned_vocab_size=8192, vocab_max_lines=None,
    hidden=256, layers=4, embedding=128, generator_hidden=64, model_size="small",
    batch=128, seq=128, warmup_fraction=0.06, seeds=(1, 2, 3),
    probe_tasks=("sst", "mrpc"), glue_tasks=("cola", "sst", "mrpc", "sts", "rte"),
    sst_subsample=8000, max_examples=None,
    pilots=(Pilot("a", "learned", 1e-3, 2.0), Pilot("b", "bert", 5e-4, 2.0)), pilot_c_hours=6.0,
    pilot_fractions=(0.25, 0.5, 1.0), stage_fractions=(0.25, 0.5, 0.75, 1.0), transfer_margin=1.0,
    stage2_max_hours=6.0, cap_hours=30.0, min_stage3_hours=0.5, throughput_steps=40,
    checkpoints_per_hour=6, diagnostics=DIAGNOSTICS)

# Tiny settings for --quick and the test: two corpus files (the vocab learned from their first
# 1,000 lines: WordPiece learning is most of the data stage's time), a 2-layer 128-wide model, 12 steps,
# 32 rows per GLUE file, 4 held-out batches per evaluation, one pilot whose regime is taken
# whatever its probes say (the pipeline, not the numbers, is tested), one GLUE task in stages 2-3
# (STS-B: the regression path; the stage-1 probes cover classification), two seeds, and stage 4's
# first diagnostic (the one whose step costs differ). Its units are mostly one core's tracing, so
# two workers share the units that are ready (pretraining runs, evaluations, trials, exports), and
# the workers skip TensorFlow's graph optimizer (grappler), which costs more than it saves on units
# this small (the same ops, unfused; the real run keeps it).
QUICK = Settings(
    corpus_files=2, held_out_files=1, learned_vocab_size=1000, vocab_max_lines=1000,
    hidden=128, layers=2, embedding=64, generator_hidden=64, model_size="tiny",
    batch=16, seq=64, warmup_fraction=0.06, seeds=(1, 2),
    probe_tasks=("sst", "mrpc"), glue_tasks=("sts",),
    sst_subsample=32, max_examples=32,
    pilots=(Pilot("a", "learned", 1e-3, 0.0),), pilot_c_hours=0.0,
    pilot_fractions=(1.0,), stage_fractions=(0.5, 1.0), transfer_margin=1.0,
    stage2_max_hours=0.0, cap_hours=0.0, min_stage3_hours=0.0, throughput_steps=4,
    checkpoints_per_hour=6, diagnostics=DIAGNOSTICS[:1], workers=2, fixed_steps=12, eval_batches=4, quick=True)
