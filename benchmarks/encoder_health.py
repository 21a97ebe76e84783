"""Can this pretrained encoder still be fine-tuned? Four figures and a probe, beside the same model at random init.

    python benchmarks/encoder_health.py MODEL_DIR [--sentences FILE.tsv] [--batch 32] [--seed 0]
                                        [--probe-examples 2000] [--probe-train TSV] [--probe-dev TSV]

MODEL_DIR is an HF ELECTRA discriminator, or an MLM model (its encoder is read), as
`convert_checkpoint.py to-hf [--step N]` or the replication exports them. On one batch of
sentences (the first column of a GLUE-style TSV with a header, by default SST-2's training file in
../shared/data), it prints:
- the scale of every LayerNorm's input (mean over real tokens of the std over features). A
  LayerNorm divides the gradient that flows back through it by that scale, so a sublayer whose
  output has grown far past the residual stream's starves everything below it;
- the token similarity at each layer's output: the mean cosine between the hidden states of any
  two real tokens of the batch. Near 1, the encoder maps every token to about the same vector;
- the sentence similarity at each layer's output: the mean cosine between the [CLS] states of two
  different sentences, what the classifier reads. Near 1, they are nearly parallel (random init's
  are too: it measures a shared direction, not whether the classes can still be told apart);
- the gradient norm per block (embeddings, each layer, the head) of fine-tuning's first step:
  a fresh linear head on [CLS], as the original's classifier, and the summed cross-entropy of a
  binary task, as the original's fine-tuning loss (labels: the TSV's last column).
And with `--probe-examples N` (default 2000; 0: off), a linear probe: logistic regression on the
frozen last layer's [CLS] and on its mean over real tokens, each feature standardised, fitted on
the first N rows of `--probe-train` and scored on `--probe-dev` (default SST-2's): whether the
sentences' label can still be read off the encoder, however small its spread beside a shared
direction (which a cosine near 1 cannot tell).
Why: an `electra` run whose discriminator collapsed to the prior fine-tuned to the majority class
on every task (experiments/electra_vs_mlm/REPORT.md), and this shows where its gradient
goes. PyTorch and transformers are needed (a diagnostic, like the peers' benchmarks).
"""

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.peers import SHARED_DATA  # noqa: E402

SST2_TRAIN = SHARED_DATA / "glue" / "SST-2" / "train.tsv"
SST2_DEV = SHARED_DATA / "glue" / "SST-2" / "dev.tsv"
SECTIONS = (("LayerNorm input scale", "layernorm_input_scale", 2),  # (title, key of health(), decimals)
            ("token similarity at the output of", "token_similarity", 3),
            ("[CLS] similarity at the output of", "sentence_similarity", 3),
            ("gradient norm, first fine-tuning step", "gradient_norm", 3),
            ("linear probe on the frozen last layer, dev %", "probe", 1))


def read_batch(path: Path, size: int):
    """The first `size` rows of a TSV with a header: (texts, integer labels from the last column)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:size + 1]
    if not rows:
        raise SystemExit(f"{path}: no rows after the header")
    try:
        return [row[0] for row in rows], [int(row[-1]) for row in rows]
    except ValueError as error:
        raise SystemExit(f"{path}: the last column must be an integer label ({error})")


def block_of(name: str) -> str:
    """'embeddings', 'layer N' or 'head' for a parameter of `health`'s encoder-plus-head model."""
    if ".embeddings" in name or "embeddings_project" in name:
        return "embeddings"
    if ".encoder.layer." in name:
        return "layer " + name.split(".encoder.layer.")[1].split(".")[0]
    return "head"


def health(encoder, features, labels, seed: int = 0) -> dict:
    """{"layernorm_input_scale": {module name: scale}, "token_similarity": {block: mean cosine},
    "sentence_similarity": {block: mean cosine}, "gradient_norm": {block: norm}} for one batch;
    features: the tokenizer's tensors [B, L]; labels [B]. Dropout off, so the figures are exact."""
    import torch

    torch.manual_seed(seed)
    head = torch.nn.Linear(encoder.config.hidden_size, 2)
    model = torch.nn.ModuleDict({"encoder": encoder, "head": head}).eval()
    real = features["attention_mask"].bool()
    scales, hooks = {}, []
    for name, module in encoder.named_modules():
        if isinstance(module, torch.nn.LayerNorm):
            hooks.append(module.register_forward_hook(
                lambda _, inputs, __, name=name: scales.__setitem__(name, inputs[0][real].std(-1).mean().item())))
    outputs = encoder(**features, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    similarity, sentences = {}, {}
    pairs = ~torch.eye(len(labels), dtype=torch.bool)  # two different sentences
    for depth, states in enumerate(outputs.hidden_states):  # the embeddings' output, then each layer's
        block = "embeddings" if depth == 0 else f"layer {depth - 1}"
        tokens = torch.nn.functional.normalize(states[real], dim=-1)  # [real tokens, H]
        similarity[block] = (tokens @ tokens.T).mean().item()
        cls = torch.nn.functional.normalize(states[:, 0], dim=-1)  # [B, H]
        sentences[block] = (cls @ cls.T)[pairs].mean().item()
    hidden = outputs.last_hidden_state  # [B, L, H]
    loss = torch.nn.functional.cross_entropy(head(hidden[:, 0]), labels, reduction="sum")
    model.zero_grad()
    loss.backward()
    squares = {}
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            block = block_of(name)
            squares[block] = squares.get(block, 0.0) + parameter.grad.pow(2).sum().item()
    return {"layernorm_input_scale": scales, "token_similarity": similarity, "sentence_similarity": sentences,
            "gradient_norm": {k: v ** 0.5 for k, v in squares.items()}}


def tokenized(tokenizer, texts, batch: int = 64) -> list:
    """The tokenizer's tensors of `texts`, `batch` sentences at a time (tokenized once, read by each model)."""
    return [tokenizer(texts[start:start + batch], padding=True, truncation=True, max_length=128, return_tensors="pt")
            for start in range(0, len(texts), batch)]


def pooled_features(encoder, batches) -> dict:
    """{"[CLS]": [N, H], "token mean": [N, H]} of the encoder's last layer on `tokenized` batches
    (dropout off, no gradient): what the classifier reads, and the mean over each sentence's real tokens."""
    import torch
    cls, mean = [], []
    encoder.eval()
    with torch.no_grad():
        for features in batches:
            hidden = encoder(**features).last_hidden_state  # [b, L, H]
            real = features["attention_mask"].unsqueeze(-1).float()  # [b, L, 1]
            cls.append(hidden[:, 0])
            mean.append((hidden * real).sum(1) / real.sum(1))
    return {"[CLS]": torch.cat(cls), "token mean": torch.cat(mean)}


def fit_linear_probe(train_x, train_y, classes: int, l2: float = 1e-3):
    """An L2-regularised logistic regression fitted on (train_x [N, H], train_y [N]); returns
    `predict(x [M, H]) -> class ids [M]`. Each feature is standardised by the training set's mean
    and spread first, so a label held in a tiny spread beside a large shared offset is read as well
    as any other. Full-batch L-BFGS from zeros: deterministic."""
    import torch
    mean, spread = train_x.mean(0), train_x.std(0) + 1e-12
    train_x = (train_x - mean) / spread
    weight = torch.zeros(train_x.shape[1], classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(train_x @ weight + bias, train_y) + l2 * weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)

    def predict(x):
        with torch.no_grad():
            return (((x - mean) / spread) @ weight + bias).argmax(-1)
    return predict


def linear_probe(train_x, train_y, dev_x, dev_y, l2: float = 1e-3) -> float:
    """Dev accuracy (%) of `fit_linear_probe` on (train_x [N, H], train_y [N])."""
    predict = fit_linear_probe(train_x, train_y, int(max(train_y.max(), dev_y.max())) + 1, l2)
    return 100.0 * (predict(dev_x) == dev_y).float().mean().item()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path,
                        help="an HF ELECTRA discriminator or MLM model (config.json, weights, vocab.txt)")
    parser.add_argument("--sentences", type=Path, default=SST2_TRAIN,
                        help="a TSV with a header: text first, integer label last (default: SST-2 train)")
    parser.add_argument("--batch", type=int, default=32, help="how many of its rows (default 32, at least 2)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the head and the random-init model")
    parser.add_argument("--probe-examples", type=int, default=2000,
                        help="training rows of the linear probe (default 2000; 0: no probe)")
    parser.add_argument("--probe-train", type=Path, default=SST2_TRAIN, help="the probe's training TSV")
    parser.add_argument("--probe-dev", type=Path, default=SST2_DEV, help="the probe's scoring TSV")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batch < 2:
        parser.error(f"--batch {args.batch}: the sentence similarity needs at least 2 sentences")
    import torch
    from transformers import BertTokenizer, ElectraConfig, ElectraForPreTraining, ElectraModel

    torch.set_num_threads(1)
    texts, labels = read_batch(args.sentences, args.batch)
    tokenizer = BertTokenizer(str(args.model_dir / "vocab.txt"), do_lower_case=True)
    features = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    # the encoder of the whole discriminator, so that loading leaves no head unused
    pretrained = ElectraForPreTraining.from_pretrained(args.model_dir, torch_dtype=torch.float32).electra
    torch.manual_seed(args.seed)  # after loading, which draws any head the dir lacks (an MLM model's)
    models = {"pretrained": pretrained,
              "random init": ElectraModel(ElectraConfig.from_pretrained(args.model_dir))}
    results = {name: health(model, features, torch.tensor(labels), args.seed) for name, model in models.items()}
    if args.probe_examples > 0:
        (train_texts, train_labels), (dev_texts, dev_labels) = (read_batch(args.probe_train, args.probe_examples),
                                                                read_batch(args.probe_dev, 10 ** 9))
        train_y, dev_y = torch.tensor(train_labels), torch.tensor(dev_labels)
        train_batches, dev_batches = tokenized(tokenizer, train_texts), tokenized(tokenizer, dev_texts)
        for name, model in models.items():
            train, dev = pooled_features(model, train_batches), pooled_features(model, dev_batches)
            results[name]["probe"] = {pool: linear_probe(train[pool], train_y, dev[pool], dev_y) for pool in train}
    print(f"{args.model_dir}: {len(texts)} sentences from {args.sentences.name}")
    for title, figure, digits in SECTIONS:
        if figure not in results["pretrained"]:
            continue
        print(f"\n{title:<44} {'pretrained':>11} {'random init':>11}")
        for row in results["pretrained"][figure]:
            print(f"{row:<44} " + " ".join(f"{r[figure][row]:>11.{digits}f}" for r in results.values()))


if __name__ == "__main__":
    main()
