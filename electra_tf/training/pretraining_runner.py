"""The pretraining job: train and/or evaluate a `PretrainingModel` under a tf.distribute strategy.

`run(config, train_dataset_fn, eval_dataset_fn, special_ids)`:
- prepares the model dir: the effective config is written as `config.json`; a config whose
  architecture differs from the one already there is refused instead of silently mixed;
- trains `num_train_steps` steps, `iterations_per_loop` steps per compiled call, resuming from the
  newest intact checkpoint (model, optimizer, step, input iterator) or starting from
  `init_checkpoint`; checkpoints every `save_checkpoints_steps`; stops with an error naming the step
  if the loss becomes NaN/Inf (the last good checkpoint stays), with one naming the file if the
  data is damaged, and after a checkpoint on SIGTERM / SIGINT; holds the model dir's lock
  (`electra_tf.dir_lock`: a second run on it is refused, one whose holder is gone taken over);
  a write that finds the disk full ends it with one line naming the file, the free space and the
  newest intact checkpoint, from which the same command resumes (`electra_tf.disk_full`);
- evaluates on every held-out example (at most `num_eval_steps` batches, the last one partial),
  at the end and, with `eval_every_steps`, during training (TensorBoard's `eval` curve), and
  writes the final metrics to `results/unsup_results.{json,txt}`. A held-out set without an
  example is refused before training starts.

The datasets come from the caller (`dataset_fn(input_context) -> tf.data.Dataset`), so this core
module does not depend on how pretraining data is stored.
"""

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from electra_tf import atomic_files, disk_full
from electra_tf.config import PretrainingConfig, has_rtd_loss
from electra_tf.dir_lock import DirLock
from electra_tf.errors import InputError
from electra_tf.objectives import PretrainingMetrics
from electra_tf.optimization import CLIP_NORM, create_optimizer, create_slots, current_learning_rate
from electra_tf.tokenization import continuation_ids, load_vocab, special_ids as vocab_special_ids
from electra_tf.pretraining import PretrainingModel
from electra_tf.training import checkpointing, distribution, interruption
from electra_tf.training.evaluation import Evaluator, check_eval_data, eval_summary, update_metrics
from electra_tf.training.reporting import GradientNorm, Reporter, write_results
from electra_tf.training.train_step import make_train_step

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]
LOCK_FILE = ".lock"  # in the model dir while a run trains there (electra_tf.dir_lock)


def special_ids(config: PretrainingConfig) -> Dict[str, int]:
    """[CLS], [SEP] and [MASK] ids from the config's vocab, which must have `vocab_size` tokens
    (and, for `whole_word_masking`, WordPiece "##" pieces): checked before anything is written."""
    vocab = load_vocab(config.vocab_file)
    if len(vocab) != config.vocab_size:
        raise InputError(f"vocab file {config.vocab_file} has {len(vocab)} tokens but vocab_size is "
                         f"{config.vocab_size}; set \"vocab_size\": {len(vocab)} in --hparams")
    if config.whole_word_masking and not continuation_ids(vocab):
        raise InputError(f"vocab file {config.vocab_file} has no WordPiece continuations (tokens starting "
                         "with ##), which whole_word_masking needs to tell words apart")
    return vocab_special_ids(vocab)


def prepare_model_dir(config: PretrainingConfig, chief: bool) -> Path:
    """Creates the model dir; refuses, when it holds a checkpoint, another architecture or (to
    train on) another train_batch_size; a training run writes the effective config."""
    model_dir = Path(config.model_dir)
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        probe = model_dir / f".write_test_{os.getpid()}"  # one per worker process: they share the dir
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise InputError(f"model dir {model_dir} is not writable: {error.strerror}") from None
    saved = model_dir / "config.json"
    latest = tf.train.latest_checkpoint(str(model_dir))
    if saved.exists() and latest:  # a config alone holds no model
        previous = PretrainingConfig.from_json_file(saved)
        old, new = previous.architecture_dict(), config.architecture_dict()
        if old != new:
            changed = sorted(k for k in new if old.get(k) != new.get(k))
            raise InputError(f"model dir {model_dir} holds a model of another architecture "
                             f"(differs in {', '.join(changed)}: was {[old[k] for k in changed]}, now "
                             f"{[new[k] for k in changed]}); use another --model-name or the old hparams")
        if config.do_train and previous.train_batch_size != config.train_batch_size and _reads_on(latest):
            raise InputError(f"model dir {model_dir} trains with train_batch_size {previous.train_batch_size}: its "
                             f"checkpoint keeps the data reader's place in batches of that size; resume with it, "
                             f"or use another --model-name")
    if chief and (config.do_train or not saved.exists()):  # an evaluation leaves the training's config
        config.save(saved)
        vocab = Path(config.vocab_file)
        if vocab.exists() and not (model_dir / "vocab.txt").exists():
            atomic_files.copy_file(vocab, model_dir / "vocab.txt")  # a model dir is self-contained
    return model_dir


def _reads_on(checkpoint: str) -> bool:
    """Whether resuming `checkpoint` continues its data reader (`checkpointing.holds_data_reader`);
    a damaged one does not, and restoring it reports the damage."""
    try:
        return checkpointing.holds_data_reader(checkpoint)
    except (tf.errors.OpError, ValueError):
        return False


class _Training:
    """The compiled loops of one run, bound to its strategy, model, optimizer and metrics."""

    def __init__(self, config: PretrainingConfig, strategy, model, optimizer):
        self.config, self.strategy, self.model, self.optimizer = config, strategy, model, optimizer
        has_rtd = has_rtd_loss(config.objective)
        with strategy.scope():
            self.metrics = PretrainingMetrics(electra_objective=has_rtd, disc_weight=config.disc_weight,
                                              padded_auc=False)  # the training step's own metrics
            # a training-only figure, so kept beside the shared metrics
            self.gradient_norm = GradientNorm()
            self.evaluator = Evaluator(strategy, model, has_rtd, config.disc_weight, config.seed)
        self.base_seed = tf.constant([config.seed, 0], tf.int64)
        self.loops = {}  # compiled training loops by stage
        # Set from another thread when a signal comes (`interruption.Interruption.promptly`): a loop
        # ends after the step it is in, not after its `iterations_per_loop` steps.
        self.stop_requested = tf.Variable(False, trainable=False, name="stop_requested")

    def _seed(self, step) -> tf.Tensor:
        """A per-step, per-replica seed for masking and sampling: resumed runs redraw the same."""
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        seed = tf.random.experimental.stateless_fold_in(self.base_seed, tf.cast(step, tf.int64))
        return tf.random.experimental.stateless_fold_in(seed, replica)

    def train_results(self) -> Dict[str, float]:
        """The training metrics since the last call (which resets them): the shared ones and grad_norm."""
        results = self.metrics.result()
        results.update(self.gradient_norm.take())
        self.metrics.reset_state()
        return results

    def train_loop(self, stage: str):
        """A tf.function running `num_steps` steps of `stage`, fewer if `stop_requested` is set
        meanwhile; returns the steps run and their mean loss."""
        if stage in self.loops:
            return self.loops[stage]
        config = self.config
        with self.strategy.scope():  # gradient accumulators are per-replica variables
            step_fn = make_train_step(
                self.model, self.optimizer, stage=stage, variables=self.model.trainable_variables_for(stage),
                jit_compile=config.jit_compile,
                gradient_accumulation_steps=config.gradient_accumulation_steps,
                clip_norm=CLIP_NORM if config.per_replica_clipping else None,
                on_output=lambda features, output: update_metrics(
                    self.metrics, features, output, self.model.special_ids["mask_id"]),
                on_gradients=self.gradient_norm.record)

        def replica_step(features):
            return step_fn(features, self._seed(self.optimizer.iterations))

        local_replicas = len(self.strategy.extended.worker_devices)

        def next_batch(iterator):
            """One local batch per local replica, handed to the replicas of this worker."""
            batches = [next(iterator) for _ in range(local_replicas)]
            return self.strategy.experimental_distribute_values_from_function(
                lambda context: batches[context.replica_id_in_sync_group % local_replicas])

        @tf.function(autograph=False)
        def loop(iterator, num_steps):
            def one_step(step, total, stopped):
                losses = self.strategy.run(replica_step, args=(next_batch(iterator),))
                loss = self.strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
                with tf.control_dependencies([loss]):  # read once this step is done, not while the loop
                    stopped = self.stop_requested.read_value()  # runs ahead on its counter alone
                return step + 1, total + loss, stopped

            start = (tf.zeros_like(num_steps), tf.constant(0.0), self.stop_requested.read_value())
            ran, total, _ = tf.while_loop(lambda step, _, stopped: (step < num_steps) & ~stopped, one_step, start)
            return ran, total / tf.cast(tf.maximum(ran, 1), tf.float32)

        self.loops[stage] = loop
        return loop


def _stage(config: PretrainingConfig, step: int) -> str:
    if not config.two_stage_generator_steps:
        return "joint"
    return "generator" if step < config.two_stage_generator_steps else "discriminator"


def _next_boundary(config: PretrainingConfig, step: int) -> int:
    """The next step at which the loop must stop: log, checkpoint, stage switch or the end."""
    boundaries = [config.num_train_steps, step + config.iterations_per_loop,
                  (step // config.log_every + 1) * config.log_every,
                  (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps]
    if config.do_eval and config.eval_every_steps:
        boundaries.append((step // config.eval_every_steps + 1) * config.eval_every_steps)
    if config.two_stage_generator_steps > step:
        boundaries.append(config.two_stage_generator_steps)
    return min(boundaries)


class RunOutput(NamedTuple):
    results: Dict[str, float]  # final metrics, as written to results/unsup_results.json
    model: PretrainingModel  # the trained model


def run(config: PretrainingConfig, train_dataset_fn: Optional[DatasetFn], eval_dataset_fn: Optional[DatasetFn],
        special_ids: Dict[str, int], stream=None, check_data: Optional[Callable[[], None]] = None,
        locate_damage: Optional[Callable[[], None]] = None) -> RunOutput:
    """Trains and/or evaluates as the config says; returns the final metrics and the model.

    `check_data` checks the input files before anything is written (after the strategy exists: a
    multi-worker strategy must be made before TensorFlow runs anything); `locate_damage`, called
    when the training data turns out damaged mid-run, raises an InputError naming the file."""
    distribution.set_determinism(config.seed, config.deterministic)
    distribution.set_precision(config.precision)
    strategy = distribution.create_strategy(config.strategy, config.tpu_name, config.tpu_zone, config.gcp_project)
    if check_data is not None:
        check_data()
    if config.do_eval:
        check_eval_data(eval_dataset_fn)
    chief = distribution.is_chief(strategy)
    writer = config.do_train and chief  # one lock per run (the chief's); evaluation only reads
    lock = DirLock(config.model_dir, Path(config.model_dir) / LOCK_FILE, "model dir",
                   report=lambda line: print(line, file=stream or sys.stdout, flush=True))
    with lock if writer else contextlib.nullcontext(), \
            disk_full.reported(lambda: checkpointing.resume_point(config.model_dir)):
        return _run_in_model_dir(config, strategy, chief, train_dataset_fn, eval_dataset_fn, special_ids, stream,
                                 locate_damage)


def _run_in_model_dir(config: PretrainingConfig, strategy, chief: bool, train_dataset_fn, eval_dataset_fn,
                      special_ids: Dict[str, int], stream, locate_damage) -> RunOutput:
    """`run` once the data is checked and (training) the model dir's lock is held."""
    model_dir = prepare_model_dir(config, chief)
    # Only whole-word masking reads the vocab's "##" pieces (callers may pass ids of no vocab file).
    pieces = continuation_ids(load_vocab(config.vocab_file)) if config.whole_word_masking else ()
    with strategy.scope():
        model = PretrainingModel(config, **special_ids, continuation_ids=pieces)
        optimizer = create_optimizer(config.learning_rate, config.num_train_steps,
                                     weight_decay_rate=config.weight_decay_rate,
                                     warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
                                     optimizer=config.optimizer,
                                     bias_correction=config.adam_bias_correction,
                                     clip_norm=None if config.per_replica_clipping else CLIP_NORM)
        optimizer = distribution.with_loss_scaling(optimizer, config.precision)
    _check_batch_sizes(config, strategy)
    training = _Training(config, strategy, model, optimizer)
    with Reporter(model_dir, config.num_train_steps, config.train_batch_size, chief, stream) as reporter:
        results = _train_and_evaluate(config, strategy, training, train_dataset_fn, eval_dataset_fn, model_dir,
                                      chief, reporter, locate_damage)
    if chief:
        write_results(results, config.results_json, config.results_txt)
    return RunOutput(results, model)


def _train_and_evaluate(config: PretrainingConfig, strategy, training: _Training, train_dataset_fn,
                        eval_dataset_fn, model_dir, chief: bool, reporter: Reporter,
                        locate_damage) -> Dict[str, float]:
    """The run's training (or loading, for evaluation only) and its final evaluation: its results."""
    model, optimizer = training.model, training.optimizer
    results: Dict[str, float] = {}
    evaluate = _evaluation(config, strategy, training, eval_dataset_fn, reporter) if config.do_eval else None
    if config.do_train:
        train_loss = _train(config, strategy, training, train_dataset_fn, model_dir, chief, reporter,
                            locate_damage, evaluate if config.eval_every_steps else None)
        if math.isfinite(train_loss):  # NaN when the run had already reached num_train_steps
            results["train_loss"] = train_loss
    else:  # evaluation only: the latest checkpoint of the model dir, or init_checkpoint
        source = tf.train.latest_checkpoint(str(model_dir)) or config.init_checkpoint
        if source is None:
            raise InputError(f"do_train is false but {model_dir} holds no checkpoint and no init_checkpoint "
                             "is set: there is no model to evaluate")
        checkpointing.load_init_checkpoint(source, model, optimizer, reset_step=False)
        print(f"evaluating {checkpointing.resolve_checkpoint(source)}", file=reporter.stream, flush=True)
    if evaluate is not None:
        results.update(evaluate())
    results["global_step"] = int(optimizer.iterations.numpy())
    return results


def _evaluation(config, strategy, training: _Training, eval_dataset_fn: DatasetFn,
                reporter: Reporter) -> Callable[[], Dict[str, float]]:
    """evaluate() -> the held-out metrics now, also logged (TensorBoard `eval`) and printed."""
    eval_dataset = strategy.distribute_datasets_from_function(eval_dataset_fn)

    def evaluate() -> Dict[str, float]:
        metrics = training.evaluator.evaluate(eval_dataset, config.num_eval_steps)
        step = int(training.optimizer.iterations.numpy())
        reporter.scalars("eval", step, metrics)
        print(f"evaluation at step {step}: {eval_summary(metrics)}", file=reporter.stream, flush=True)
        return metrics

    return evaluate


def _check_batch_sizes(config: PretrainingConfig, strategy) -> None:
    """Batches must split evenly over the replicas, and each replica's over the accumulation steps."""
    replicas = strategy.num_replicas_in_sync
    for name in ("train_batch_size", "eval_batch_size"):
        if getattr(config, name) % replicas:
            raise InputError(f"{name} {getattr(config, name)} is not divisible by the {replicas} replicas")
    if (config.train_batch_size // replicas) % config.gradient_accumulation_steps:
        raise InputError(f"the per-replica batch {config.train_batch_size // replicas} is not divisible by "
                         f"gradient_accumulation_steps {config.gradient_accumulation_steps}")


def _train(config, strategy, training: _Training, dataset_fn, model_dir: Path, chief: bool,
           reporter: Reporter, locate_damage: Optional[Callable[[], None]] = None,
           evaluate: Optional[Callable[[], Dict[str, float]]] = None) -> float:
    """The training loop; returns the mean loss of the last logged interval. SIGTERM / SIGINT end it
    with a checkpoint after the step it is in (a cluster's workers: at the step TensorFlow's
    handler picks; `interruption`); damaged input data and a lost worker end it with one error
    naming the cause (`_run_loop`).

    `evaluate`, if given, runs every `eval_every_steps` steps before the last (which the caller
    evaluates anyway) and at step 0, so the curve has its first point.
    """
    optimizer = training.optimizer
    worker_id = distribution.worker_id(strategy)
    # This worker's own input pipeline, iterated directly: a plain tf.data iterator can be saved in
    # checkpoints (tf.distribute's distributed iterators cannot), so resuming continues the stream.
    num_workers = strategy.num_replicas_in_sync // len(strategy.extended.worker_devices)
    iterator = iter(dataset_fn(tf.distribute.InputContext(num_workers, worker_id, strategy.num_replicas_in_sync)))
    with strategy.scope():
        generators = checkpointing.dropout_generators(training.model)
    checkpoints = checkpointing.Checkpoints(model_dir, chief, worker_id, config.keep_checkpoint_max,
                                            model=training.model, optimizer=optimizer, iterator=iterator,
                                            dropout_generators=generators)
    restored = checkpoints.restore_latest(lambda line: print(line, file=reporter.stream, flush=True))
    if restored:
        print(f"resuming from {restored}", file=reporter.stream, flush=True)
    elif config.init_checkpoint:
        loaded = checkpointing.load_init_checkpoint(config.init_checkpoint, training.model, optimizer,
                                                    config.init_checkpoint_reset_step)
        print(f"initialised from {loaded}", file=reporter.stream, flush=True)
    with strategy.scope():  # after the reads above, on purpose (see create_slots): the loop is traced once
        create_slots(optimizer, training.model.trainable_variables)
    step = logged_step = int(optimizer.iterations.numpy())
    if evaluate is not None and step == 0:
        evaluate()
    reporter.start(step)
    last_loss, loss_sum = math.nan, 0.0
    # One process stops after the step it is in; the workers of a cluster at a step TF agrees on.
    promptly = (lambda: training.stop_requested.assign(True)) if num_workers == 1 else None
    interrupt = interruption.Interruption(reporter.stream, promptly=promptly)
    preemption = interruption.preemption_handler(strategy, checkpoints, interrupt) if num_workers > 1 else None
    with interrupt:
        while step < config.num_train_steps:
            stage = _stage(config, step)
            planned = _next_boundary(config, step) - step
            num_steps, loss = _run_loop(training.train_loop(stage), iterator, planned, checkpoints, strategy,
                                        locate_damage)
            if num_steps and not np.isfinite(loss):
                raise FloatingPointError(
                    f"the loss became {loss} between steps {step} and {step + num_steps}; training stopped. "
                    f"The last good checkpoint is {checkpoints.latest or 'none (no checkpoint yet)'}")
            loss_sum += loss * num_steps
            step += num_steps
            stopped_early = num_steps < planned  # a signal ended the loop after the step it was in
            if (step % config.log_every == 0 or step == config.num_train_steps or stopped_early) and step > logged_step:
                last_loss, loss_sum = loss_sum / (step - logged_step), 0.0
                logged_step = step
                reporter.train_progress(step, last_loss, training.train_results(),
                                        float(current_learning_rate(optimizer)))
            if stopped_early:  # saved where it stopped; its partial window was logged above
                raise interrupt.stop(step, checkpoints.save(step))
            if config.two_stage_generator_steps and step == config.two_stage_generator_steps:
                training.model.init_discriminator_from_generator()
            if step % config.save_checkpoints_steps == 0 or step == config.num_train_steps:
                checkpoints.save(step)
            if evaluate is not None and step % config.eval_every_steps == 0 and step < config.num_train_steps:
                evaluate()  # before a signal can stop the run, so the curve keeps this point
            if preemption is not None:  # every worker, at every boundary: TF agrees on the step to save
                interruption.quietly(preemption.save_checkpoint_if_preempted, step=step)
            elif interrupt.requested:
                raise interrupt.stop(step, checkpoints.save(step))
    return last_loss


def _run_loop(loop, iterator, num_steps: int, checkpoints: checkpointing.Checkpoints, strategy,
              locate_damage: Optional[Callable[[], None]]) -> Tuple[int, float]:
    """Runs one compiled loop of `num_steps` steps; returns the steps it ran (fewer when a signal
    stopped it) and their mean loss.

    The reader's DataLossError (a TFRecord cut short or damaged after the start-up check) becomes an
    InputError naming the file, found by `locate_damage`; a lost peer of a multi-worker run, one
    error too (`distribution.lost_workers_reported`)."""
    try:
        with distribution.lost_workers_reported(
                strategy, lambda: f"to resume from the last checkpoint, {checkpoints.latest or 'none yet'}"):
            ran, loss = loop(iterator, tf.constant(num_steps))
            return int(ran), float(loss)
    except tf.errors.DataLossError as error:
        if locate_damage is not None:
            locate_damage()  # raises InputError naming the damaged file
        raise InputError(f"the training data is damaged ({distribution.first_line(error)}); rebuild or re-copy it. "
                         f"The last checkpoint is {checkpoints.latest or 'none'}") from None
