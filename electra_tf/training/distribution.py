"""Devices and numerics for a run: the tf.distribute strategy, the precision policy, determinism."""

import contextlib
import json
import os
from typing import Callable

import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError, WorkerLost


def create_strategy(name: str, tpu_name=None, tpu_zone=None, gcp_project=None) -> tf.distribute.Strategy:
    """The strategy for `PretrainingConfig.strategy`.

    auto: TPU when `tpu_name` is set, MirroredStrategy when more than one GPU is visible, else one
    device; one_device; mirrored (all local GPUs, or the CPU); multi_worker
    (MultiWorkerMirroredStrategy from the TF_CONFIG environment variable); tpu.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if name == "auto":
        name = "tpu" if tpu_name else "mirrored" if len(gpus) > 1 else "one_device"
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise InputError("strategy multi_worker needs the TF_CONFIG environment variable "
                             "(cluster and task of this worker)")
        try:
            json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as error:
            raise InputError(f"TF_CONFIG is not valid JSON: {error}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_name, zone=tpu_zone,
                                                                     project=gcp_project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise InputError(f"strategy {name!r}: expected auto, one_device, mirrored, multi_worker or tpu")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints, summaries and results (worker 0, or the only one)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0)


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """How many processes (workers, the chief included) take part in the run: 1 unless multi-worker."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    jobs = resolver.cluster_spec().as_dict()
    return max(1, len(jobs.get("worker", [])) + len(jobs.get("chief", [])))


def worker_id(strategy: tf.distribute.Strategy) -> int:
    """This process's index among the workers of its task type (0 outside a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver.task_id if resolver is not None and resolver.task_id is not None else 0


@contextlib.contextmanager
def lost_workers_reported(strategy: tf.distribute.Strategy, then: Callable[[], str]):
    """The block, under a multi-worker strategy, with a lost peer reported as one `WorkerLost` line.

    A worker that died or became unreachable aborts the collectives of the others (TensorFlow
    notices a closed connection at once, a silent peer through the coordination service's
    heartbeat), which then raise one of several runtime errors deep in a traceback; this turns them
    into "another worker ... stopped ... Restart all N workers <then()>". With one worker they pass
    unchanged."""
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.DeadlineExceededError,
            tf.errors.CancelledError) as error:
        workers = num_workers(strategy)
        if workers == 1:
            raise
        raise WorkerLost(f"another worker of the cluster stopped or became unreachable ({first_line(error)}). "
                         f"Restart all {workers} workers {then()}") from None


def first_line(error: tf.errors.OpError) -> str:
    """The gist of a TensorFlow runtime error, without the node and op names around it."""
    lines = [line.strip().split("}} ", 1)[-1] if line.strip().startswith("{{function_node") else line.strip()
             for line in error.message.splitlines()]  # "{{function_node ...}} Collective ops is aborted by: ..."
    lines = [line for line in lines if line]
    kept = [i for i, line in enumerate(lines)
            if not line.startswith(("Graph execution error", "Detected at node", "File "))]
    if not kept:
        return lines[0] if lines else type(error).__name__
    gist = lines[kept[0]]
    if gist.endswith(":") and kept[0] + 1 < len(lines):  # "tasks are unhealthy ...:" and then which
        gist += " " + lines[kept[0] + 1]
    return gist.split("}} ")[-1].split(" [Op:")[0].split(" [[")[0]


def distribute_rows(strategy: tf.distribute.Strategy, batch: dict):
    """A global batch (a dict of tensors, examples on axis 0; inside a tf.function) as a per-replica
    value: of n replicas, replica r gets rows [r * B // n, (r + 1) * B // n), so the replicas hold
    the whole batch in order, whatever its size (an epoch's last, smaller batch included). Every
    worker of a multi-worker run passes the same global batch and keeps its replicas' rows."""

    def rows(context: tf.distribute.experimental.ValueContext) -> dict:
        replica, replicas = context.replica_id_in_sync_group, context.num_replicas_in_sync
        return {name: t[replica * tf.shape(t)[0] // replicas:(replica + 1) * tf.shape(t)[0] // replicas]
                for name, t in batch.items()}

    return strategy.experimental_distribute_values_from_function(rows)


def gather_rows(strategy: tf.distribute.Strategy, values):
    """Per-replica results (any nest of tensors, examples on axis 0) of `distribute_rows`' batch
    concatenated in replica order: one result per example of the global batch, in its order."""
    return tf.nest.map_structure(lambda value: strategy.gather(value, axis=0), values)


def set_precision(policy: str) -> None:
    """float32, mixed_bfloat16 or mixed_float16 for every layer built afterwards.

    mixed_float16 on a machine without GPUs also turns grappler's remapper off for every graph first
    run afterwards in this process (`precision_scope` does not turn it back on: the layers it builds
    run after it). The remapper fuses a float16 matmul and its bias into oneDNN's inner product,
    whose float16 kernel is the reference one: 736 ms against 0.73 ms unfused for [1024, 128] x
    [128, 384] on an AVX512-FP16 Xeon (benchmarks/RESULTS.md, "float16")."""
    tf_keras.mixed_precision.set_global_policy(policy)
    if policy == "mixed_float16" and not tf.config.list_physical_devices("GPU"):
        tf.config.optimizer.set_experimental_options({"remapping": False})


def with_loss_scaling(optimizer, policy: str):
    """Under mixed_float16, `optimizer` in a LossScaleOptimizer (dynamic loss scaling: float16
    gradients would underflow without it; `make_train_step` scales and unscales); else itself."""
    if policy == "mixed_float16":
        return tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer


@contextlib.contextmanager
def precision_scope(policy: str):
    """`set_precision(policy)` for the layers built within the block, the previous global policy
    after it: a layer keeps the policy it was built with, and whatever runs later in the process
    (another fine-tuning trial, an export) starts from the policy it had before; grappler's
    remapper, once float16 turned it off on CPU, stays off (the block's layers run after it)."""
    before = tf_keras.mixed_precision.global_policy()
    set_precision(policy)
    try:
        yield
    finally:
        tf_keras.mixed_precision.set_global_policy(before)


def set_determinism(seed: int, deterministic: bool) -> None:
    """Seeds Python, NumPy and TF; with `deterministic`, deterministic kernels and per-layer
    random generators whose state lives in variables, so a resumed run continues the very same
    dropout stream (it is saved with the model's checkpoint)."""
    tf_keras.utils.set_random_seed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
        tf_keras.backend.experimental.enable_tf_random_generator()
