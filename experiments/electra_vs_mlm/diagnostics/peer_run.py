"""What turns the peer's curve (pretrain_peer_curve.py) into a full run that spans sessions (issue #42's
defect-or-recipe check): its state saved atomically every few hundred steps and resumed from, the
windows as JSON lines, the held-out metrics the replication's "learns" rule reads, and its
discriminator in HF's format, which `run_finetuning.py` fine-tunes as it does our exports.

Files under the run's `--output-dir`: `state.pt` (models, optimizer moments, the random generators'
states, the windows so far), `windows.jsonl` (one window per line), `held_out.json` and
`discriminator/` once the run has reached its last step.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Tuple

import numpy as np

STATE, WINDOWS, HELD_OUT, DISCRIMINATOR = "state.pt", "windows.jsonl", "held_out.json", "discriminator"


def _replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Writes through a temporary sibling renamed over `path`: a kill leaves the old file whole."""
    temporary = path.with_name(path.name + ".tmp")
    write(temporary)
    os.replace(temporary, path)


def run_settings(args, vocab_size: int) -> dict:
    """What a saved run must share with the one resuming it (`--steps` may grow, paths may move)."""
    fixed = ("objective", "with_replacement", "total_steps", "warmup", "learning_rate", "batch", "window",
             "generator_hidden_size", "init", "seed")
    return {"vocab_size": vocab_size, **{name: getattr(args, name) for name in fixed}}


def save_state(directory: Path, step: int, settings: dict, models: Dict[str, object], moments: Dict[str, tuple],
               rng: np.random.Generator, sampler, windows: List[dict]) -> None:
    """The run after `step` steps: enough that a resumed run takes the same steps as one that went on."""
    import torch
    state = {"step": step, "settings": settings, "windows": windows,
             "models": {name: model.state_dict() for name, model in models.items() if model is not None},
             "moments": {name: [m, v] for name, (m, v) in moments.items()},
             "numpy_rng": rng.bit_generator.state, "sampler": sampler.get_state(),
             "torch_rng": torch.get_rng_state()}
    directory.mkdir(parents=True, exist_ok=True)
    _replace_atomically(directory / STATE, lambda path: torch.save(state, path))
    _replace_atomically(directory / WINDOWS, lambda path: path.write_text(
        "".join(json.dumps(window) + "\n" for window in windows)))


def load_state(directory: Path, settings: dict, models: Dict[str, object], moments: Dict[str, tuple],
               rng: np.random.Generator, sampler) -> Tuple[int, List[dict]]:
    """(steps done, windows so far), restoring the saved state into the given objects; (0, []) when
    there is none. A state saved with other settings is refused, naming the first that differs."""
    import torch
    path = directory / STATE
    if not path.is_file():
        return 0, []
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)  # our own file, written above
    except Exception as error:  # torch raises its own types for a damaged file
        raise SystemExit(f"{path}: cannot read the saved run ({str(error).splitlines()[0]}); "
                         f"remove it to start over") from None
    for key in sorted(set(settings) | set(state["settings"])):
        if state["settings"].get(key) != settings.get(key):
            raise SystemExit(f"{path}: saved with {key} {state['settings'].get(key)!r}, this run has "
                             f"{settings.get(key)!r}; use another --output-dir or the saved settings")
    for name, model in models.items():
        if model is not None:
            model.load_state_dict(state["models"][name])
    with torch.no_grad():
        for name, (m, v) in moments.items():
            m.copy_(state["moments"][name][0])
            v.copy_(state["moments"][name][1])
    rng.bit_generator.state = state["numpy_rng"]
    sampler.set_state(state["sampler"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["windows"]


def held_out(step: Callable, batches: Iterable[dict], roc_auc: Callable) -> dict:
    """The discriminator's held-out metrics over every real token of `batches`, as the replication
    reads ours: its token-mean loss, the constant predictor's (the binary entropy of the replaced
    share, electra_tf/objectives/metrics.py), the exact AUC; and the generator's accuracy at the
    used slots (the mean over batches). `step(batch)` is the training step's forward:
    (loss, metrics, (logits, labels) of the real tokens)."""
    import torch
    losses, counts, accuracies, logits, labels = [], [], [], [], []
    with torch.no_grad():
        for batch in batches:
            _, metrics, (batch_logits, batch_labels) = step(batch)
            losses.append(metrics["disc_loss"])
            counts.append(len(batch_labels))
            accuracies.append(metrics["masked_lm_accuracy"])
            logits.append(batch_logits)
            labels.append(batch_labels)
    labels = np.concatenate(labels)
    replaced = float(labels.mean())
    constant = -(replaced * np.log(replaced) + (1 - replaced) * np.log(1 - replaced))
    return {"disc_loss": float(np.average(losses, weights=counts)), "disc_loss_constant_predictor": float(constant),
            "disc_auc": roc_auc(np.concatenate(logits), labels), "masked_lm_accuracy": float(np.mean(accuracies)),
            "replaced_fraction": replaced, "tokens": int(sum(counts))}


def write_held_out(directory: Path, metrics: dict) -> None:
    _replace_atomically(directory / HELD_OUT, lambda path: path.write_text(json.dumps(metrics, indent=1) + "\n"))


def export_discriminator(discriminator, vocab_file: str, directory: Path) -> Path:
    """`directory/discriminator/`: HF's own `save_pretrained` of the discriminator, its tokenizer and
    the vocab as vocab.txt (what `init_checkpoint` reads), renamed into place when whole."""
    from transformers import ElectraTokenizer
    out = directory / DISCRIMINATOR
    temporary = directory / (DISCRIMINATOR + ".tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    discriminator.save_pretrained(temporary)
    ElectraTokenizer(vocab_file, do_lower_case=True).save_pretrained(temporary)
    shutil.copyfile(vocab_file, temporary / "vocab.txt")
    os.replace(temporary, out)
    return out
