"""The attention core as one fused CPU kernel (fused_attention.cc), built on first use.

On CPU, TensorFlow's attention writes the [B, heads, L, L] scores, probabilities and dropout
products to memory and reads them back many times; the bandwidth this costs dominates the batched
products themselves (ELECTRA-Small at batch 32: 18 % of the step in batched matmuls running at
30-50 GFLOP/s). The kernel runs softmax(Q K^T / sqrt(D) + mask) * dropout → · V one (sequence, head)
at a time inside the cache, reading Q/K/V straight from the fused QKV projection; its gradient kernel
recomputes the probabilities instead of storing them. Same math as `SelfAttention`'s TensorFlow
path (same dropout mask); sums differ only in rounding order.

The kernel is compiled with the machine's C++ compiler (`$CXX`, else c++ or g++) against the
installed TensorFlow's headers, once per source, TensorFlow version and CPU, into
`$ELECTRA_TF_BUILD_DIR` (default `~/.cache/electra_tf`); a failed build warns once and the model
keeps TensorFlow's kernels. `ELECTRA_TF_FUSED_ATTENTION=0` turns the kernel off. It is used only
where it can be: float32 on a machine without GPUs, outside XLA clusters, and never in a graph that
is being saved (a SavedModel must load without this library).
"""

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Optional

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # XLA-context test: no public API in TF 2.20
from tensorflow.python.saved_model import save_context  # in-save test: no public API in TF 2.20

SOURCE = Path(__file__).with_name("fused_attention.cc")
_OPTIMIZE = ["-O3", "-march=native", "-DEIGEN_DONT_PARALLELIZE"]  # threads come from TF's intra-op pool

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
    return [compiler, "-shared", "-fPIC", "-w", *_OPTIMIZE, *tf.sysconfig.get_compile_flags(), str(SOURCE),
            "-o", str(output), *tf.sysconfig.get_link_flags()]


def library_path() -> Path:
    """Where the built kernel lives: a name that changes with the source, TF, flags and CPU."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), tf.__version__.encode(), " ".join(_OPTIMIZE).encode(),
                 " ".join(tf.sysconfig.get_compile_flags()).encode(), _cpu_signature().encode()):
        key.update(part)
    root = Path(os.environ.get("ELECTRA_TF_BUILD_DIR") or Path.home() / ".cache" / "electra_tf")
    return root / f"fused_attention_{key.hexdigest()[:16]}.so"


def build(path: Path) -> None:
    """Compiles the kernel into `path` (to a temporary name first: concurrent builds are safe)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"electra_tf: compiling the fused attention kernel into {path} (once; about 20 s)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        staged = Path(tmp) / path.name
        done = subprocess.run(_compile_command(staged), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiling {SOURCE} failed:\n{done.stderr[-3000:]}")
        os.replace(staged, path)


def library():
    """The loaded op module (building it if needed), or None where it is off or cannot be built."""
    with _lock:
        if "library" not in _loaded:
            _loaded["library"] = None
            if os.environ.get("ELECTRA_TF_FUSED_ATTENTION", "1") != "0":
                try:
                    path = library_path()
                    if not path.exists():
                        build(path)
                    _loaded["library"] = tf.load_op_library(str(path))
                except (OSError, RuntimeError, tf.errors.NotFoundError) as error:
                    warnings.warn(f"electra_tf: fused attention kernel unavailable, using TensorFlow's "
                                  f"attention ops instead: {error}", RuntimeWarning, stacklevel=2)
        return _loaded["library"]


@contextlib.contextmanager
def disabled():
    """Within this block (this thread), models are traced with TensorFlow's attention ops."""
    before = getattr(_disabled, "on", False)
    _disabled.on = True
    try:
        yield
    finally:
        _disabled.on = before


def usable(dtype: tf.DType) -> bool:
    """Whether a model being traced now may use the kernel for activations of `dtype`."""
    if dtype != tf.float32 or getattr(_disabled, "on", False) or save_context.in_save_context():
        return False
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return False
    return not tf.config.list_logical_devices("GPU") and library() is not None


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
    keep = tf.zeros([0], tf.bool) if keep is None else keep
    mask_bias = tf.stop_gradient(mask_bias)

    @tf.custom_gradient
    def fused(qkv):
        def grad(d_context):  # [B, L, H] -> [B, L, 3H]
            return ops.electra_attention_grad(qkv, mask_bias, keep, d_context, num_heads=num_heads,
                                              keep_scale=keep_scale)

        return ops.electra_attention(qkv, mask_bias, keep, num_heads=num_heads, keep_scale=keep_scale), grad

    return fused(qkv)
