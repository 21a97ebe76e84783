"""What the throughput benchmarks share: peers of the same shape, and stepping them in pairs.

The machine is shared and its speed drifts, so a benchmark measures every peer beside "ours", in
pairs: each variant lives in its own long-lived subprocess (a `Worker`; oneDNN and the allocator
are chosen when TF starts), and the two of a pair are stepped in turn, round after round, each step
followed by one GEMM measurement, so both see the same load (`run_groups`). Only the pair and the
GEMM process are alive at a time. A worker runs the benchmark script itself with `--worker VARIANT`
and answers each "step" line on stdin with the step's seconds (`serve`).

Peers are built to the encoder shape of ours: `Shape` -> Model Garden's `EncoderConfig`
(`mg_encoder`) and HF's `ElectraConfig` (`hf_config`); Model Garden's optimizer is its own AdamW
(`mg_adamw`).
"""

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

PROTOCOL = "@@ "  # prefix of the lines a worker sends back to the driver
# The real data (GLUE, SQuAD, vocab): ../shared/data beside the checkout, or $ELECTRA_SHARED_DATA.
SHARED_DATA = Path(os.environ.get("ELECTRA_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


@dataclasses.dataclass(frozen=True)
class Shape:
    """One encoder's sizes (ELECTRA-Small: hidden 256, 12 layers, 4 heads, FFN 1024, embedding 128)."""
    hidden: int
    layers: int
    heads: int
    ffn: int
    embedding: int
    vocab: int = 30522


def peak_rss_gb() -> float:
    """This process's peak resident memory (Linux VmHWM), in GB; 0 where unknown."""
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 2 ** 20
    except (OSError, StopIteration):
        return 0.0


def shim_pkg_resources() -> None:
    """`official.nlp.tasks` imports tensorflow_hub, which imports `pkg_resources.parse_version`;
    the venv has no setuptools, so provide that one function from `packaging`."""
    import types
    try:
        import pkg_resources  # noqa: F401
    except ImportError:
        from packaging.version import parse
        sys.modules["pkg_resources"] = types.SimpleNamespace(parse_version=parse)


def build_gemm(bfloat16: bool = False) -> Callable[[int], float]:
    """run(i) -> best tf.matmul GFLOP/s of a few 1024^2 and 2048^2 products (float32 or bfloat16)."""
    import tensorflow as tf
    dtype = tf.bfloat16 if bfloat16 else tf.float32
    matrices = {n: (tf.cast(tf.random.normal([n, n]), dtype), tf.cast(tf.random.normal([n, n]), dtype))
                for n in (1024, 2048)}

    def run(i):
        best = 0.0
        for n, (a, b) in matrices.items():
            for _ in range(3):
                start = time.perf_counter()
                tf.matmul(a, b).numpy()
                best = max(best, 2 * n ** 3 / (time.perf_counter() - start) / 1e9)
        return best

    return run


def mg_encoder(shape: Shape, max_positions: int = 512):
    """Model Garden's BertEncoder config of this shape (its ELECTRA encoders are BertEncoders)."""
    from official.nlp.configs import encoders
    return encoders.EncoderConfig(type="bert", bert=encoders.BertEncoderConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
        num_attention_heads=shape.heads, intermediate_size=shape.ffn, embedding_size=shape.embedding,
        max_position_embeddings=max_positions, type_vocab_size=2))


def mg_adamw(learning_rate: float, decay_steps: int, warmup_steps: int, weight_decay: float, iterations: int):
    """Model Garden's own AdamW (`official.modeling.optimization`): no decay on LayerNorm and biases,
    global-norm clip 1.0, polynomial (linear) decay after a polynomial warm-up; `iterations` steps done."""
    from official.modeling import optimization
    factory = optimization.OptimizerFactory(optimization.OptimizationConfig({
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": weight_decay, "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": learning_rate, "decay_steps": decay_steps, "end_learning_rate": 0.0}},
        "warmup": {"type": "polynomial", "polynomial": {"warmup_steps": warmup_steps}}}))
    optimizer = factory.build_optimizer(factory.build_learning_rate())
    optimizer.iterations.assign(iterations)
    return optimizer


def hf_config(shape: Shape, **kwargs):
    """HF transformers' ElectraConfig of this shape (exact GELU, dropout 0.1: HF's defaults)."""
    from transformers import ElectraConfig
    return ElectraConfig(vocab_size=shape.vocab, embedding_size=shape.embedding, hidden_size=shape.hidden,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         intermediate_size=shape.ffn, max_position_embeddings=512, **kwargs)


def serve(run: Callable[[int], float], warmup: int, answer_value: bool = False) -> None:
    """Worker side: run the warm-up steps, then one step per "step" line from the driver, answering
    with its seconds (or, with `answer_value`, what `run` returned, e.g. GFLOP/s) and the peak memory."""
    for i in range(warmup):
        run(i)
    print(f"{PROTOCOL}0 {peak_rss_gb():.2f}", flush=True)
    for i, line in enumerate(sys.stdin, start=warmup):
        if line.strip() != "step":
            break
        start = time.perf_counter()
        value = run(i)
        elapsed = time.perf_counter() - start
        print(f"{PROTOCOL}{value if answer_value else elapsed} {peak_rss_gb():.2f}", flush=True)


class WorkerDied(RuntimeError):
    """A variant's process ended before answering (its stderr tail is the message)."""


def worker_env(onednn: bool = True, pooled_allocator: bool = False, **extra: str) -> Dict[str, str]:
    """The environment of a worker: TF's default allocator unless `pooled_allocator` (a builder may
    still set it, as the run scripts do), oneDNN on or off, and `extra` variables."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0", **extra)
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if pooled_allocator:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    return env


class Worker:
    """One variant in its own interpreter (`script --worker VARIANT ARGS`), stepped through stdin/stdout."""

    def __init__(self, script: str, variant: str, args: List[str], env: Dict[str, str]):
        self.variant = variant
        self.peak_rss_gb = self.ready_s = 0.0
        self.log = tempfile.TemporaryFile("w+")  # the worker's stderr (a pipe could fill up and block it)
        self.proc = subprocess.Popen([sys.executable, script, "--worker", variant, *args], env=env,
                                     cwd=os.path.dirname(os.path.dirname(os.path.abspath(script))),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def receive(self) -> float:
        """The worker's next answer (0 for "ready"); records its peak memory."""
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                value, self.peak_rss_gb = map(float, line[len(PROTOCOL):].split())
                return value
        self.log.seek(0)
        code = self.proc.wait()
        hint = " (killed: out of memory?)" if code == -9 else ""
        raise WorkerDied(f"worker {self.variant} died (exit {code}){hint}:\n{self.log.read()[-2000:]}")

    def step(self) -> float:
        try:
            self.proc.stdin.write("step\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it died: receive() says how
            pass
        return self.receive()

    def close(self, timeout: float = 30) -> None:
        """Ends the worker: EOF on its stdin ends `serve` after the step it may be in; a worker still
        running after `timeout` seconds (stuck, or a Ctrl-C came while waiting) is killed."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=timeout)
        except (BrokenPipeError, subprocess.TimeoutExpired):  # it died, or it does not end
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


def pair_groups(variants: List[str], base: str = "ours") -> List[List[str]]:
    """(base, peer) for every other variant, or each variant alone when `base` is not among them."""
    peers = [v for v in variants if v != base]
    return [[base, peer] for peer in peers] if base in variants and peers else [[v] for v in variants]


def run_groups(groups: List[List[str]], start: Callable[[str], Worker], steps: int, label: str,
               gemm_peak: bool = True, pause_s: float = 0.0, turn: int = 1, settle_s: float = 0.0) -> list:
    """Steps each group's workers in turn for `steps` rounds, with `gemm_peak` a GEMM measurement
    after every step. `pause_s` seconds of idle (not timed) follow every step, so that one side's
    spinning OpenMP threads have parked before the other side's turn: each step then runs as on a
    machine of its own. With `turn` > 1 a worker takes `turn` timed steps back to back per turn,
    after `settle_s` seconds of idle and one untimed step: the other side's threads, which may spin
    after their last request (ONNX Runtime's spin for about 60 ms), have then stopped, and its own
    are awake.

    `start(variant)` returns a Worker ("gemm" included). One entry per completed group:
    {"variants": [...], "times": {variant: [seconds per timed step]}, "gemm": [GFLOP/s],
    "ready_s": {variant: seconds from its start to its ready answer}, "peak_rss_gb": {variant: GB}}.
    A group whose worker dies (e.g. out of memory) is reported and dropped. Every worker started is
    closed on the way out, whatever ends the run (an error, Ctrl-C), so that none is left behind.
    """
    def started(variant, workers):
        begin = time.perf_counter()
        workers.append(start(variant))  # closed by the caller even if it never gets ready
        worker = workers[-1]
        worker.receive()
        worker.ready_s = time.perf_counter() - begin
        print(f"  {label}: {variant} ready after {worker.ready_s:.1f} s "
              f"(peak memory {worker.peak_rss_gb:.1f} GB)", flush=True)
        return worker

    gemm_workers: List[Worker] = []
    results = []
    try:
        gemm = started("gemm", gemm_workers) if gemm_peak else None
        for group in groups:
            workers: List[Worker] = []
            try:
                for variant in group:  # built one at a time: no overlapping builds
                    started(variant, workers)
                entry = {"variants": group, "times": {variant: [] for variant in group}, "gemm": [],
                         "ready_s": {worker.variant: worker.ready_s for worker in workers}}
                for first in range(0, steps, turn):
                    for worker in workers:
                        if turn > 1:
                            time.sleep(settle_s)
                            worker.step()
                        for _ in range(min(turn, steps - first)):
                            entry["times"][worker.variant].append(worker.step())
                            time.sleep(pause_s)
                            if gemm:
                                entry["gemm"].append(gemm.step())
                entry["peak_rss_gb"] = {worker.variant: worker.peak_rss_gb for worker in workers}
                results.append(entry)
            except WorkerDied as error:
                print(f"  {label}: group {'+'.join(group)} dropped: {error}", flush=True)
            finally:
                with contextlib.ExitStack() as closing:  # every close runs, even if one raises
                    for worker in workers:
                        print(f"  {label}: {worker.variant} done (peak memory {worker.peak_rss_gb:.1f} GB)",
                              flush=True)
                        closing.callback(worker.close)
    finally:
        with contextlib.ExitStack() as closing:
            for worker in gemm_workers:
                closing.callback(worker.close)
    return results
