"""Fine-tuning runs: `num_trials` trials from the same pretrained encoder, scored on dev, aggregated.

Each trial (seed `seed + trial - 1`) builds a fresh model (its layers computing in `precision`,
float32, bfloat16 or float16 with dynamic loss scaling, with float32 variables either way), loads
the pretrained `electra/*` weights (or keeps random ones with `random_init`), trains with the
original's optimizer (AdamW without bias correction, layer-wise LR decay, 10 % warmup, linear
decay, clip 1.0) through the shared `electra_tf.training.train_step.make_train_step`, evaluates
every epoch or `eval_every_steps` (stopping early after `early_stopping_patience` evaluations
without a better score; `finetune.model_selection`), writes TensorBoard events (`tensorboard/`
in its model dir, with the shared `electra_tf.training.reporting.Reporter`), saves its model
to `finetuning_models/<tasks>_model_<trial>/finetuned` (beside the run's config and vocab, which
`finetune.saved_model` exports from), and optionally writes GLUE-server test files from the trial
with the best dev score so far. Results are rewritten after every trial.

Under a tf.distribute `strategy` (the run's `config.strategy`, made by the shared
`electra_tf.training.distribution.create_strategy`), model, optimizer and steps are built in its
scope; each global batch is split into contiguous rows over the replicas, each replica's loss is
its rows' sum, and the optimizer sums the replicas' gradients: one device's step. Prediction
splits batches the same way and gathers the outputs back in order. Under "multi_worker" every
worker reads the data and draws the same global batches, keeping its replicas' rows; only the
chief writes the model dirs, results and TensorBoard events (the others' checkpoint copies and
task outputs go to a scratch dir, `WorkerFiles`), and a lost worker ends the others with one error.

SIGTERM or SIGINT stops a trial at the next step with a checkpoint of its model, optimizer and step
(`interrupted`, with `interrupted.json`) in its model dir; running the same command again skips
the finished trials (their scores are in the results file) and resumes that trial at that step.
A signal during a trial's last step, its final evaluation or the saving of its model and scores
lets that trial finish and write its scores; the run then stops with the same exit status and
marks the next trial as not started (`interrupted.json` with step 0), so that the same command
goes on with that trial. After the last trial there is nothing left to resume, and the run ends
as usual. The workers of a multi-worker run stop together (TF's `PreemptionCheckpointHandler`,
`ClusterStops`): at a step that all of them reach, of the same trial or the next, whichever of
them was signalled.
"""

import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from electra_tf.checkpoints.model_dir import VOCAB_FILE
from electra_tf.errors import InputError
from electra_tf.optimization import create_optimizer, create_slots, current_learning_rate
from electra_tf.progress import Progress
from electra_tf.training.checkpointing import WorkerFiles
from electra_tf.training.distribution import (create_strategy, distribute_rows, gather_rows, lost_workers_reported,
                                              num_workers, precision_scope, set_determinism, with_loss_scaling)
from electra_tf.training.interruption import ClusterStops, Interruption
from electra_tf.training.reporting import GradientNorm, Reporter
from electra_tf.training.train_step import make_train_step
from finetune.config import RUN_CONFIG, FinetuningConfig
from finetune.inputs import eval_batches, steps_per_epoch, train_batches
from finetune.model import FinetuningModel
from finetune.model_selection import ModelSelection, Scores, main_score
from finetune.pretrained import load_encoder_weights
from finetune.results import format_table, write_results
from finetune.task import EvalSplit
from finetune.task_data import TaskData, load_task_data, make_tokenizer
from finetune.writing import guarded

FINETUNED = "finetuned"  # checkpoint prefix of a fine-tuned model in its model dir
BEST = "best"  # the best evaluation's checkpoint (keep_best_model, early_stopping_patience)
INTERRUPTED = "interrupted"  # a trial stopped by a signal: its checkpoint, and `interrupted.json` (step, scores)
TENSORBOARD = "tensorboard"  # a trial's TensorBoard events: tensorboard/{train,eval} in its model dir
TASK_CARDS = "task_cards.json"  # {task: Task.card()}: labels, tags, columns, for predicting later
GLOBAL_ROWS = "global_rows"  # a training batch's column: the rows of the whole global batch (a mean's divisor)


class Trial:
    """One fine-tuning run: model, optimizer and compiled train / predict steps."""

    def __init__(self, config: FinetuningConfig, data: TaskData, trial: int, stream,
                 strategy: Optional[tf.distribute.Strategy] = None, files: Optional[WorkerFiles] = None):
        """`strategy`: the run's (`config.strategy`); None is TF's default, one device undistributed.
        `files`: where this worker writes (the run's; by default, the strategy's chief writes)."""
        self.config, self.data, self.trial, self.stream = config, data, trial, stream
        self.strategy = strategy or tf.distribute.get_strategy()
        self.files = files or WorkerFiles(self.strategy)
        # what the tasks write when they score (SQuAD's answers): the chief's into results_dir
        self.outputs = (config if self.files.chief else
                        dataclasses.replace(config, results_dir=self.files.results_dir(config.results_dir)))
        set_determinism(config.seed + trial - 1, deterministic=False)
        self.rng = np.random.default_rng(config.seed + trial - 1)
        with self.strategy.scope(), precision_scope(config.precision):  # variables stay float32
            self.model = FinetuningModel(config.encoder_config(), data.tasks, config)
        self.model_dir = Path(config.model_dir(trial))
        self.checkpoint = tf.train.Checkpoint(finetuning_model=self.model)
        self.batch_spec = data.batch_spec  # every task's keys: every head reads every batch
        self.make_batch = data.train_batch
        self.predict_step = tf.function(self._distributed_predict, input_signature=[self.batch_spec],
                                        autograph=False)

    def initialise(self) -> None:
        """The pretrained encoder (or a fine-tuned model to evaluate), unless random_init."""
        source = Path(self.config.init_checkpoint)
        if (source / f"{FINETUNED}.index").exists():
            try:
                self.checkpoint.read(str(source / FINETUNED)).assert_existing_objects_matched()
            except (AssertionError, ValueError, tf.errors.OpError) as error:
                raise InputError(f"fine-tuned model {source / FINETUNED} does not fit task_names "
                                 f"{self.config.task_names} and this model size: "
                                 f"{str(error).splitlines()[0]}") from None
            self.log(f"restored fine-tuned model {source / FINETUNED}")
        elif self.config.random_init:
            self.log("random_init: the encoder starts from random weights")
        else:
            self.log(load_encoder_weights(self.model.encoder_variables, source).summary())

    def log(self, text: str) -> None:
        print(f"[trial {self.trial}] {text}", file=self.stream, flush=True)

    def _predict(self, batch):
        outputs = self.model(batch, training=False)
        losses = {task.name: head.per_example_loss(outputs[task.name], batch)
                  for task, head in zip(self.model.tasks, self.model.heads)}
        return self.model.predictions(outputs), losses

    def _distributed_predict(self, batch):
        """`_predict` on each replica's rows of the batch, gathered back into the batch's order."""
        per_replica = self.strategy.run(self._predict, args=(distribute_rows(self.strategy, batch),))
        return gather_rows(self.strategy, per_replica)

    def predict(self, split: EvalSplit):
        """(predictions, per-example losses) of a split, in example (feature) order; the predictions
        in the task's form (`Task.gather`: e.g. a number per example, SQuAD's arrays per window)."""
        n = len(split.features)
        losses = np.zeros(n, np.float64)
        columns: Dict = {}  # output key (None for a head with one output) -> its value per feature
        for indices, batch in eval_batches(split.features, self.config.eval_batch_size, self.config.dynamic_padding,
                                           self.config.max_seq_length, self.data.split_batch(split)):
            batch_predictions, batch_losses = self.predict_step(batch)
            losses[indices] = batch_losses[split.task.name].numpy()
            for key, value in split.task.prediction_columns(batch_predictions[split.task.name]).items():
                column = columns.setdefault(key, [None] * n)
                for row, index in zip(value.numpy(), indices):
                    column[index] = row
        return split.task.gather(columns), losses

    def evaluate(self) -> Scores:
        scores: Scores = {}
        for split in self.data.dev:  # MNLI's two dev splits score into one task's metrics
            predictions, losses = self.predict(split)
            scores.setdefault(split.task.name, {}).update(
                split.task.score(self.outputs, split, predictions, float(losses.mean())))
        return scores

    def compile_train_step(self, num_steps: int):
        """`train_step(batch) -> loss`: the original's optimizer for `num_steps` steps and the shared
        training step, compiled once for any batch and sequence length."""
        config, strategy = self.config, self.strategy
        with strategy.scope():
            optimizer = create_optimizer(config.learning_rate, num_steps, weight_decay_rate=config.weight_decay_rate,
                                         warmup_proportion=config.warmup_proportion,
                                         layerwise_lr_decay_power=config.layerwise_lr_decay,
                                         fixed_layerwise_decay=config.fixed_layerwise_decay,
                                         n_transformer_layers=self.model.encoder_config.num_hidden_layers)
            self.optimizer = with_loss_scaling(optimizer, config.precision)  # mixed_float16: dynamic loss scaling
            self.gradient_norm = GradientNorm()

        accumulation = config.gradient_accumulation_steps

        def loss_fn(model, batch, seed):
            """This replica's (micro-batch's) rows' summed loss, or their share of the global batch's
            mean: the step sums the micro-batches' gradients and the optimizer the replicas', so N
            replicas and k micro-batches take one device's step on the whole batch."""
            outputs = model(batch, training=True)
            loss = model.loss(batch, outputs)  # []
            if config.loss_reduction == "mean":  # each row holds the global batch's size (a replica's empty share: 1)
                loss /= tf.reduce_max(tf.concat([batch[GLOBAL_ROWS], [1.0]], 0))
            return loss, outputs

        with strategy.scope():  # the micro-batches' gradient accumulators are per-replica variables
            step_fn = make_train_step(self.model, self.optimizer, loss_fn=loss_fn, sum_micro_batches=True,
                                      gradient_accumulation_steps=accumulation, on_gradients=self.gradient_norm.record)

        def train_step(batch):
            rows = tf.shape(batch["task_id"])[0]
            batch = {**batch, GLOBAL_ROWS: tf.fill([rows], tf.cast(rows, tf.float32))}  # [B]
            losses = strategy.run(step_fn, args=(distribute_rows(strategy, batch),))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)  # the global batch's loss

        return tf.function(train_step, input_signature=[self.batch_spec], autograph=False)

    def train(self, stops: Interruption) -> Optional[Scores]:
        """Trains; returns the dev scores of the final (or, with keep_best_model or early stopping, the
        best) evaluation, if any.

        A signal received before the last step stops the trial with a checkpoint (`stops`: this
        process's `Interruption`, or `ClusterStops`, at a step every worker reaches); one received during
        the last step is left to `run`, which stops after this trial."""
        config, train = self.config, self.data.train
        keep_partial = not config.drop_last_partial_batch
        per_epoch = steps_per_epoch(len(train), config.train_batch_size, keep_partial)
        num_steps = int(per_epoch * config.num_train_epochs)
        if num_steps < 1:
            raise InputError(f"{len(train)} training examples, train_batch_size {config.train_batch_size} and "
                             f"num_train_epochs {config.num_train_epochs} give no training step")
        train_step = self.compile_train_step(num_steps)
        progress = Progress(num_steps, "train", " steps", stream=self.stream)
        resumed = self._resume_state()
        with self.strategy.scope():  # after the read, on purpose: one trace
            create_slots(self.optimizer, self.model.trainable_variables)
        self.files.barrier()  # every worker has read the model dir before the chief starts it afresh
        if resumed is None and self.files.chief:
            self._start_model_dir()
        state = resumed or {"step": 0, "scores": None}
        scores, start = state["scores"], state["step"]
        selection = ModelSelection(config.early_stopping_patience, state)
        loss_sum, logged = 0.0, start
        batches = train_batches(train, config.train_batch_size, num_steps, self.rng, config.dynamic_padding,
                                config.max_seq_length, self.make_batch, start=start, keep_partial=keep_partial)
        with Reporter(self.model_dir / TENSORBOARD, num_steps, config.train_batch_size, self.files.chief,
                      self.stream) as reporter:
            reporter.start(start)
            for step, batch in enumerate(batches, start=start + 1):
                loss = float(train_step(batch))
                if not math.isfinite(loss):
                    raise FloatingPointError(f"trial {self.trial}: the loss became {loss} at step {step}")
                loss_sum += loss
                progress.done = step
                if step % config.iterations_per_loop == 0 or step == num_steps:
                    self._report_training(reporter, progress, step, loss_sum / (step - logged))
                    loss_sum, logged = 0.0, step
                if step % config.save_checkpoints_steps == 0:
                    self.files.write_checkpoint(self.checkpoint, self.model_dir / FINETUNED)
                if self.data.dev and self._evaluates(step, num_steps, per_epoch):
                    scores = self.evaluate()
                    self.log(f"epoch {step / per_epoch:.2f} dev: " + "; ".join(
                        f"{task} " + " ".join(f"{k} {v:.2f}" for k, v in m.items()) for task, m in scores.items()))
                    reporter.scalars("eval", step, {f"{task}/{name}": value for task, metrics in scores.items()
                                                    for name, value in metrics.items()})
                    if selection.record(step, scores) and config.keeps_best:
                        self.files.write_checkpoint(self.checkpoint, self.model_dir / BEST)
                    if selection.stop and step < num_steps:
                        if step > logged:  # the steps since the last report, which the loop's end would report
                            self._report_training(reporter, progress, step, loss_sum / (step - logged))
                        self.log(f"early stopping at step {step}: {selection.stale} evaluations without a better "
                                 f"dev score than {selection.best:.2f} (step {selection.best_step})")
                        break
                if step < num_steps:
                    state = dict(step=step, scores=scores, **selection.state())
                    stops.after_step(step, lambda: self._save_interrupted(state))
        if config.keeps_best and self.data.dev:
            self.checkpoint.read(str(self.model_dir / BEST)).assert_existing_objects_matched()
            self.log(f"kept the best evaluation (step {selection.best_step}, dev score {selection.best:.2f})")
            scores = selection.best_scores
        self.files.write_checkpoint(self.checkpoint, self.model_dir / FINETUNED)
        return scores

    def _start_model_dir(self) -> None:
        """A fresh model dir (wiped, as the original) with what an export needs: config, cards, vocab."""
        shutil.rmtree(self.model_dir, ignore_errors=True)
        self.model_dir.mkdir(parents=True)
        self.config.save(self.model_dir / RUN_CONFIG)
        (self.model_dir / TASK_CARDS).write_text(json.dumps({t.name: t.card() for t in self.data.tasks}, indent=2))
        shutil.copyfile(self.config.vocab_file, self.model_dir / VOCAB_FILE)

    def _report_training(self, reporter: Reporter, progress: Progress, step: int, loss: float) -> None:
        """The progress line and the TensorBoard `train` scalars of the steps since the last report:
        mean loss, the next step's learning rate, mean gradient norm, examples/s and, under
        mixed_float16, the loss scale."""
        values = {"loss": loss, "learning_rate": float(current_learning_rate(self.optimizer)),
                  **self.gradient_norm.take(), "examples_per_second": reporter.throughput(step)}
        line = f"{progress.line()} loss {loss:.4f}"
        if self.config.precision == "mixed_float16":
            values["loss_scale"] = float(self.optimizer.loss_scale)
            line += f" loss scale {values['loss_scale']:g}"
        self.log(line)
        reporter.scalars("train", step, values)

    def _evaluates(self, step: int, num_steps: int, per_epoch: int) -> bool:
        """Whether dev is scored after `step`: every eval_every_steps steps if set, else every epoch
        (evaluate_every_epoch), and after the last step either way."""
        every = self.config.eval_every_steps or (per_epoch if self.config.evaluate_every_epoch else None)
        return step == num_steps or (every is not None and step % every == 0)

    def _training_state(self) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(finetuning_model=self.model, optimizer=self.optimizer)

    def _save_interrupted(self, state: dict) -> str:
        """Saves model, optimizer and `state` (step, dev scores so far) for `_resume_state`."""
        path = self.files.write_checkpoint(self._training_state(), self.model_dir / INTERRUPTED)
        if self.files.chief:
            (self.model_dir / f"{INTERRUPTED}.json").write_text(json.dumps(state))
        return path

    def _resume_state(self) -> Optional[dict]:
        """The state of this trial saved by `_save_interrupted` (model and optimizer restored), or
        None when there is none, the trial had not started (`mark_not_started`) or the run's config
        changed since."""
        marker = self.model_dir / f"{INTERRUPTED}.json"
        saved_config = self.model_dir / RUN_CONFIG
        if not marker.exists() or not saved_config.exists():  # a trial not started has no config yet
            return None
        saved = FinetuningConfig.as_saved_today(json.loads(saved_config.read_text()))
        if saved != json.loads(self.config.to_json()):
            self.log(f"{self.model_dir} holds an interrupted trial of another config: starting over")
            return None
        state = json.loads(marker.read_text())
        self._training_state().read(str(self.model_dir / INTERRUPTED)).assert_existing_objects_matched()
        self.log(f"resuming at step {state['step']} from {self.model_dir / INTERRUPTED}")
        return state

    def write_test_files(self) -> List[str]:
        """Each test split's predictions as its task writes them (`Task.write_test`): GLUE-server
        files in results/glue_test/, SQuAD 2.0's test answers, a user task's JSONL."""
        written = []
        for split in self.data.test:
            predictions, _ = self.predict(split)
            written.append(str(split.task.write_test(self.outputs, split, predictions, self.outputs.results_dir)))
        return written


def run(config: FinetuningConfig, stream=None) -> dict:
    """Every trial of the config, holding its tasks' lock, with a full disk reported as one line
    (`finetune.writing`); returns the results document (also written to results_dir)."""
    strategy = create_strategy(config.strategy) if config.strategy else tf.distribute.get_strategy()
    data = load_task_data(config, make_tokenizer(config))  # reads only: bad input stops before any write
    files = WorkerFiles(strategy)
    then = "to run again: it starts from its first trial (only a stop by SIGTERM keeps a point to resume from)"
    try:
        with guarded(config, files.chief), lost_workers_reported(strategy, lambda: then):
            return _trials(config, data, stream or sys.stdout, strategy, files)
    finally:
        files.close()


def _trials(config: FinetuningConfig, data: TaskData, stream, strategy: tf.distribute.Strategy,
            files: WorkerFiles) -> dict:
    first, trials, extra = _finished_trials(config, stream)
    best_test = _written_score(trials, extra)
    with Interruption(stream) as interrupt:
        cluster = num_workers(strategy) > 1
        stops = ClusterStops(interrupt, strategy, config.finetuning_models_dir) if cluster else interrupt
        for number in range(first, config.num_trials + 1):
            trial = Trial(config, data, number, stream, strategy, files)
            trial.initialise()
            scores = trial.train(stops) if config.do_train else None
            if scores is None and data.dev:
                scores = trial.evaluate()
            if scores is not None:
                trials.append(scores)
            candidate = main_score(scores) if scores else -number
            if config.write_test_outputs and number <= config.n_writes_test and candidate > best_test:
                best_test = candidate
                written = trial.write_test_files()
                extra["test_predictions"] = {"trial": number, "files": written}
                trial.log(f"wrote {len(written)} test file(s): {', '.join(written)}")
            if config.do_train and not config.keep_all_models and number < config.num_trials and files.chief:
                shutil.rmtree(trial.model_dir, ignore_errors=True)
            document = write_results(files.results_dir(config.results_dir), config.tasks_key, trials, extra)
            if files.chief:
                (trial.model_dir / f"{INTERRUPTED}.json").unlink(missing_ok=True)  # this trial is done
            if stops.requested_here and number < config.num_trials:
                mark_not_started(config, number + 1)
                raise interrupt.stop_with(f"after trial {number} of {config.num_trials} (its scores are in "
                                          f"{Path(config.results_dir) / config.tasks_key}_results.json)")
            if stops.requested_here:
                trial.log("the signal came during the last trial, which finished: the run is complete")
    if trials:
        print(f"\n{config.tasks_key}: dev scores over {len(trials)} trial(s)\n{format_table(document['aggregate'])}",
              file=stream, flush=True)
    return document


def mark_not_started(config: FinetuningConfig, number: int) -> None:
    """Marks trial `number` as the one to run next (step 0, no checkpoint) for `_finished_trials`."""
    model_dir = Path(config.model_dir(number))
    shutil.rmtree(model_dir, ignore_errors=True)  # a stale model dir of an earlier run would be resumed
    model_dir.mkdir(parents=True)
    (model_dir / f"{INTERRUPTED}.json").write_text(json.dumps({"step": 0}))


def _written_score(trials: list, extra: dict) -> float:
    """The score of the finished trial whose test files were written, as `_trials` compares a trial
    by (its main dev score, or -its number when there are none); -inf when none was written."""
    written = extra.get("test_predictions", {}).get("trial")
    return -math.inf if written is None else main_score(trials[written - 1]) if trials else -written


def _finished_trials(config: FinetuningConfig, stream):
    """(first trial to run, the scores of those before it, the results document's extra fields).

    After an interruption, the first trial to run is the interrupted one; the scores of the trials
    before it come back from the results file."""
    extra: dict = {"tasks": list(config.task_names), "config": config.to_dict()}
    interrupted = [number for number in range(1, config.num_trials + 1)
                   if (Path(config.model_dir(number)) / f"{INTERRUPTED}.json").exists()]
    results = Path(config.results_dir) / f"{config.tasks_key}_results.json"
    if not interrupted or interrupted[0] == 1 or not results.exists():
        return (interrupted or [1])[0], [], extra
    document = json.loads(results.read_text())
    saved = FinetuningConfig.as_saved_today(document.get("config") or {})
    if saved != json.loads(json.dumps(extra["config"])):  # another run's scores
        print(f"{results} holds the scores of a run with another config: starting again at trial 1",
              file=stream, flush=True)
        return 1, [], extra
    if "test_predictions" in document:
        extra["test_predictions"] = document["test_predictions"]
    print(f"trials 1-{interrupted[0] - 1} are done (scores in {results}); resuming trial {interrupted[0]}",
          file=stream, flush=True)
    return interrupted[0], document["trials"][:interrupted[0] - 1], extra
