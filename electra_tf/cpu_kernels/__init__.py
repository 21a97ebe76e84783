"""Fused CPU kernels for the training step, built on first use, and their TensorFlow wrappers.

On CPU, TensorFlow runs the step's non-matmul work as many small ops, each a pass over memory:
- the attention core (fused_attention.cc) writes the [B, heads, L, L] scores, probabilities and
  dropout products and reads them back several times (ELECTRA-Small at batch 32: 18 % of the step
  in batched matmuls at 30-50 GFLOP/s); the kernel runs softmax(Q K^T / sqrt(D) + mask) · dropout
  → · V one (sequence, head) at a time inside the cache, reading Q/K/V straight from the fused QKV
  projection, and its gradient recomputes the probabilities instead of storing them;
- bias + GELU and bias + dropout + residual + LayerNorm (fused_pointwise.cc) are chains of 8-15
  element-wise ops each, forward and backward; the kernels make one pass per row each way;
- the MLM loss's softmax cross-entropy over [B*N, 30522] logits (fused_softmax_xent.cc) takes
  each row through its passes while it stays in the cache;
- the optimizer's AdamWeightDecay update (fused_adam_weight_decay.cc) is a dozen element-wise ops
  per variable; the kernel makes one pass and equals those ops bit for bit.
Same math as the TensorFlow path (`SelfAttention`, `layer_utils.gelu`, `layer_utils.LayerNorm`,
`Dropout` with the same dropout masks, `tf.nn.sparse_softmax_cross_entropy_with_logits`,
`AdamWeightDecay`); sums differ only in rounding order.

The kernels are compiled with the machine's C++ compiler (`$CXX`, else c++ or g++) against the
installed TensorFlow's headers, once per source, TensorFlow version and CPU, into
`$ELECTRA_TF_BUILD_DIR` (default `~/.cache/electra_tf`); a failed build warns once and the model
keeps TensorFlow's ops. `ELECTRA_TF_CPU_KERNELS=0` turns them off. They are used only where they
can be: float32 on a machine without GPUs, outside XLA clusters, and never in a graph that is being
saved (a SavedModel must load without this library).
"""

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Optional, Tuple

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # XLA-context test: no public API in TF 2.20
from tensorflow.python.saved_model import save_context  # in-save test: no public API in TF 2.20

SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("fused_attention.cc", "fused_pointwise.cc", "fused_softmax_xent.cc",
                             "fused_adam_weight_decay.cc"))
HEADERS = (Path(__file__).with_name("kernel_util.h"),)  # included by the sources
# Threads come from TF's intra-op pool; no FMA contraction, so that the optimizer's update rounds
# as TensorFlow's separate ops do; sqrt without errno, so that it vectorizes.
_OPTIMIZE = ["-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-DEIGEN_DONT_PARALLELIZE"]

_lock = threading.Lock()
_loaded = {}  # "library": the loaded op module, or None after a failed or refused build
_disabled = threading.local()


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU model and its flags (Linux), else the architecture."""
    try:
        with open("/proc/cpuinfo") as info:
            lines = [line for line in info if line.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.machine()


def _compile_command(output: Path) -> list:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        raise RuntimeError("no C++ compiler found (set CXX)")
    return [compiler, "-shared", "-fPIC", "-w", *_OPTIMIZE, *tf.sysconfig.get_compile_flags(),
            *map(str, SOURCES), "-o", str(output), *tf.sysconfig.get_link_flags()]


def library_path() -> Path:
    """Where the built kernels live: a name that changes with the sources, TF, flags and CPU. Not
    with where TF's headers lie (a `-I` flag): the TF version names them, and another checkout's
    virtualenv then reuses the build instead of compiling for 40 s again."""
    flags = [flag for flag in tf.sysconfig.get_compile_flags() if not flag.startswith("-I")]
    key = hashlib.sha256()
    for part in (*(path.read_bytes() for path in SOURCES + HEADERS), tf.__version__.encode(),
                 " ".join(_OPTIMIZE).encode(), " ".join(flags).encode(), _cpu_signature().encode()):
        key.update(part)
    root = Path(os.environ.get("ELECTRA_TF_BUILD_DIR") or Path.home() / ".cache" / "electra_tf")
    return root / f"cpu_kernels_{key.hexdigest()[:16]}.so"


def build(path: Path) -> None:
    """Compiles the kernels into `path` unless another process has meanwhile. One build at a time
    per path (a lock file beside it, released by the OS if its holder dies): the processes a run or
    a test suite starts together on a new machine would otherwise each spend the 40 s of CPU. The
    compiler writes a temporary name first, so a killed build leaves nothing that looks built, and
    builds that overlap are safe: where the lock cannot be had (a file system without flock, a
    holder stuck for BUILD_WAIT_SECONDS), this process builds without it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(path.with_suffix(".lock"), path):
        if path.exists():
            return
        print(f"electra_tf: compiling the fused CPU kernels into {path} (once; about 40 s)", file=sys.stderr,
              flush=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            staged = Path(tmp) / path.name
            done = subprocess.run(_compile_command(staged), capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"compiling {', '.join(map(str, SOURCES))} failed:\n{done.stderr[-3000:]}")
            os.replace(staged, path)


BUILD_WAIT_SECONDS = 300  # several builds' time on a loaded machine


@contextlib.contextmanager
def _build_lock(lock_path: Path, library_file: Path):
    """Holds `lock_path` exclusively while the block runs, if it can. Opened read-only, so that a
    lock file another user made (in a shared build dir) locks as well."""
    try:
        descriptor = os.open(lock_path, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError:
        descriptor = None
    if descriptor is None:  # no lock file here: build as if alone
        yield
        return
    try:
        deadline, waiting = time.monotonic() + BUILD_WAIT_SECONDS, False
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    print(f"electra_tf: waiting for another process's build of {library_file}", file=sys.stderr,
                          flush=True)
                    waiting = True
                if time.monotonic() > deadline:
                    break  # its holder is stuck: build without the lock
                time.sleep(0.5)
            except OSError:  # the file system has no flock (NFS without lockd, some FUSE mounts)
                break
        yield
    finally:
        os.close(descriptor)  # releases the lock, if held


def library():
    """The loaded op module (building it if needed), or None where it is off or cannot be built."""
    with _lock:
        if "library" not in _loaded:
            _loaded["library"] = None
            if os.environ.get("ELECTRA_TF_CPU_KERNELS", "1") != "0":
                try:
                    path = library_path()
                    if not path.exists():
                        build(path)
                    _loaded["library"] = tf.load_op_library(str(path))
                except (OSError, RuntimeError, tf.errors.NotFoundError) as error:
                    warnings.warn(f"electra_tf: fused CPU kernels unavailable, using TensorFlow's ops "
                                  f"instead: {error}", RuntimeWarning, stacklevel=2)
        return _loaded["library"]


@contextlib.contextmanager
def disabled():
    """Within this block (this thread), models are traced with TensorFlow's ops only."""
    before = getattr(_disabled, "on", False)
    _disabled.on = True
    try:
        yield
    finally:
        _disabled.on = before


@tf.autograph.experimental.do_not_convert  # plain Python; AutoGraph must not step into the build
def usable(dtype: tf.DType) -> bool:
    """Whether a model being traced now may use the kernels for activations of `dtype`."""
    if dtype != tf.float32 or getattr(_disabled, "on", False) or save_context.in_save_context():
        return False
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return False
    return not tf.config.list_logical_devices("GPU") and library() is not None


def prepare(dtype) -> None:
    """Builds and loads the kernels now, when a model that may use them for `dtype` is constructed.

    Called eagerly (from `Encoder.__init__`), so that the one-time compile runs outside any traced
    function: inside one, AutoGraph would step into the build's Python calls (`os.fsdecode`,
    `subprocess`) and warn about each, and the first run would be noisier than the second."""
    if tf.executing_eagerly():
        usable(tf.as_dtype(dtype))


def _keep_or_empty(keep: Optional[tf.Tensor]) -> tf.Tensor:
    return tf.zeros([0], tf.bool) if keep is None else keep


def attention(qkv: tf.Tensor, mask_bias: tf.Tensor, keep: Optional[tf.Tensor], num_heads: int,
              keep_scale: float = 1.0) -> tf.Tensor:
    """Multi-head attention context from the fused projection; call only where `usable`.

    Args:
      qkv: float32 [B, L, 3H]: queries | keys | values, head h at columns h*D of each third.
      mask_bias: float32 [B, L] added to every query's scores over the keys (0 or -10000).
      keep: bool [B, heads, L, L] dropout keep mask of the probabilities, or None (no dropout).
      keep_scale: the factor kept probabilities are multiplied by (1 / keep probability).
    Returns the context float32 [B, L, H] (head h at columns h*D); differentiable in qkv only.
    """
    ops = library()
    keep = _keep_or_empty(keep)
    mask_bias = tf.stop_gradient(mask_bias)

    @tf.custom_gradient
    def fused(qkv):
        def grad(d_context):  # [B, L, H] -> [B, L, 3H]
            return ops.electra_attention_grad(qkv, mask_bias, keep, d_context, num_heads=num_heads,
                                              keep_scale=keep_scale)

        return ops.electra_attention(qkv, mask_bias, keep, num_heads=num_heads, keep_scale=keep_scale), grad

    return fused(qkv)


def bias_gelu(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Exact GELU of x + bias: x float32 [N, F] (a matmul's output), bias [F] → [N, F].
    Call only where `usable`; the gradient recomputes the GELU's input instead of storing it."""
    ops = library()

    @tf.custom_gradient
    def fused(x, bias):
        return ops.electra_bias_gelu(x, bias), lambda dy: ops.electra_bias_gelu_grad(dy, x, bias)

    return fused(x, bias)


def residual_layer_norm(y: tf.Tensor, bias: tf.Tensor, keep: Optional[tf.Tensor], residual: tf.Tensor,
                        gamma: tf.Tensor, beta: tf.Tensor, keep_scale: float, epsilon: float) -> tf.Tensor:
    """LayerNorm(dropout(y + bias) + residual) · gamma + beta over the last axis; call only where `usable`.

    y, residual: float32 [N, H] (y a matmul's output); bias, gamma, beta [H]; keep: bool [N, H]
    dropout keep mask, or None (no dropout); kept values are multiplied by keep_scale.
    Returns [N, H]; the gradient uses the normalized values and 1/std kept from the forward pass.
    """
    ops = library()
    keep = _keep_or_empty(keep)

    @tf.custom_gradient
    def fused(y, bias, residual, gamma, beta):
        out, normalized, inv_std = ops.electra_residual_layer_norm(y, bias, keep, residual, gamma, beta,
                                                                   keep_scale=keep_scale, epsilon=epsilon)

        def grad(d_out) -> Tuple[tf.Tensor, ...]:
            d_residual, d_y, d_bias, d_gamma, d_beta = ops.electra_residual_layer_norm_grad(
                d_out, normalized, inv_std, gamma, keep, keep_scale=keep_scale)
            return d_y, d_bias, d_residual, d_gamma, d_beta

        return out, grad

    return fused(y, bias, residual, gamma, beta)


def sparse_softmax_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """-log softmax(logits)[labels], as `tf.nn.sparse_softmax_cross_entropy_with_logits`; call only
    where `usable`. labels int32 [...], logits float32 [..., V] → float32 [...]; differentiable in
    logits (the gradient, softmax - onehot, comes out of the forward pass as in TensorFlow's op)."""
    ops = library()
    classes = tf.shape(logits)[-1]

    @tf.custom_gradient
    def fused(logits):  # [N, V] -> [N]
        loss, backprop = ops.electra_sparse_softmax_xent(logits, tf.reshape(labels, [-1]))
        return loss, lambda d_loss: backprop * d_loss[:, tf.newaxis]

    return tf.reshape(fused(tf.reshape(logits, [-1, classes])), tf.shape(labels))


def adam_weight_decay_update(var: tf.Variable, m: tf.Variable, v: tf.Variable, grad: tf.Tensor, lr: tf.Tensor, *,
                             beta_1: float, beta_2: float, epsilon: float, weight_decay: float) -> tf.Operation:
    """The original's AdamWeightDecay update of `var` and its moments `m`, `v` (see
    `optimization.AdamWeightDecay`) by one kernel; call only where `usable`. grad float32 of var's
    shape, lr a float32 scalar (multiplier included), weight_decay 0 for no decay; `1 - beta` in
    float64 first, as the TensorFlow path. Returns the op that assigns all three."""
    new_var, new_m, new_v = library().electra_adam_weight_decay(
        var, m, v, grad, lr, beta_1=beta_1, one_minus_beta_1=1.0 - beta_1, beta_2=beta_2,
        one_minus_beta_2=1.0 - beta_2, epsilon=epsilon, weight_decay=weight_decay)
    return tf.group(m.assign(new_m), v.assign(new_v), var.assign(new_var))
