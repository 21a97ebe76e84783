"""Where does an encoder keep what chunking needs? A linear probe on each layer's frozen words.

    python experiments/electra_vs_mlm/diagnostics/chunk_probe.py MODEL_DIR... [--train-sentences 2000]
                                                   [--train FILE] [--test FILE] [--seed 0] [--output FILE.json]

Each MODEL_DIR is an HF ELECTRA export (a discriminator, or an MLM model: its encoder is read), as
the replication's `results/hf/` holds them; the first one's architecture at random init (seeded)
is probed too. The CoNLL-2000 words are featurized as the `chunk` preset's are
(`finetune.chunking.featurize`: lower-cased and accent-stripped, each word read at its first
sub-token, at most 256 tokens a sentence). For every encoder and each of its hidden states (the
embeddings' output, then every layer's), a logistic regression (`benchmarks/encoder_health.py`'s
`fit_linear_probe`) fitted on the words of the first `--train-sentences` training sentences
tags every word of the test file, and the score is chunk F1 by conlleval's rules
(`finetune.chunking.chunk_f1`) against its gold tags.
Why: every `electra` run of the replication fine-tunes on chunking below random init, even
`s4_lr_5e-4`, whose discriminator learned and whose last layer still carries SST-2 for a linear
probe (experiments/electra_vs_mlm/REPORT.md). This shows in which layers the chunk information is
still there.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.encoder_health import fit_linear_probe  # noqa: E402
from benchmarks.peers import SHARED_DATA  # noqa: E402
from electra_tf.tokenization import Tokenizer  # noqa: E402
from finetune import chunking  # noqa: E402

CONLL = SHARED_DATA / "conll2000"
MAX_SEQ_LENGTH = 256  # the chunk preset's


def word_features(encoder, features, batch: int = 32) -> List:
    """Per hidden state (embeddings, then each layer), the frozen vectors of every kept word's first
    sub-token, sentence after sentence: [words, H] each. Dropout off, no gradient."""
    import torch
    encoder.eval()
    states: List[List] = []
    with torch.no_grad():
        for start in range(0, len(features.token_ids), batch):
            ids = features.token_ids[start:start + batch]
            width = max(len(row) for row in ids)
            tokens = torch.zeros(len(ids), width, dtype=torch.long)
            mask = torch.zeros(len(ids), width, dtype=torch.long)
            for row, row_ids in enumerate(ids):
                tokens[row, :len(row_ids)] = torch.as_tensor(row_ids.astype("int64"))
                mask[row, :len(row_ids)] = 1
            hidden = encoder(input_ids=tokens, attention_mask=mask, output_hidden_states=True).hidden_states
            if not states:
                states = [[] for _ in hidden]
            for depth, layer in enumerate(hidden):  # [b, T, H]
                states[depth] += [layer[row, torch.as_tensor(positions.astype("int64"))]
                                  for row, positions in enumerate(features.labeled_positions[start:start + batch])]
    return [torch.cat(layer) for layer in states]


def probe_f1(train_x, train_tags: Sequence[str], test_x, test_sentences: Sequence[Sequence[str]],
             tag_names: Sequence[str]) -> float:
    """Chunk F1 (conlleval) of a linear probe fitted on words (train_x [N, H], their tags) that
    tags the test words (test_x [M, H], M the words of `test_sentences`' gold tags, in order)."""
    import torch
    index = {tag: i for i, tag in enumerate(tag_names)}
    predict = fit_linear_probe(train_x, torch.tensor([index[tag] for tag in train_tags]), len(tag_names))
    guessed = [tag_names[int(i)] for i in predict(test_x)]
    predicted, cursor = [], 0
    for gold in test_sentences:
        predicted.append(guessed[cursor:cursor + len(gold)])
        cursor += len(gold)
    return chunking.chunk_f1(test_sentences, predicted)["f1"]


def probe(model_dirs: Sequence[Path], train_file: Path, test_file: Path, train_sentences: int,
          seed: int) -> Dict[str, Dict[str, float]]:
    """{encoder: {hidden state: chunk F1}} for each model dir and, after them, random init."""
    import torch
    from transformers import ElectraConfig, ElectraForPreTraining, ElectraModel

    torch.set_num_threads(1)
    train = chunking.read_sentences(train_file, train_sentences, prefixes="BI")
    test = chunking.read_sentences(test_file, prefixes="BI")
    tokenizer = Tokenizer(model_dirs[0] / "vocab.txt")
    tag_names = sorted({tag for s in train + test for tag in s.tags})  # what the probe predicts: IOB2, as the files
    bioes = sorted({tag for s in train + test for tag in chunking.to_bioes(s.tags)})  # featurize's labels, unread here
    featurized = [chunking.featurize(split, tokenizer, MAX_SEQ_LENGTH, {tag: i for i, tag in enumerate(bioes)})
                  for split in (train, test)]
    kept = [[s.tags[:len(positions)] for s, positions in zip(split, f.labeled_positions)]
            for split, f in zip((train, test), featurized)]
    encoders = {}
    for directory in model_dirs:  # the encoder of the whole discriminator, so that loading leaves no head unused
        encoders[directory.name] = ElectraForPreTraining.from_pretrained(directory, torch_dtype=torch.float32).electra
    torch.manual_seed(seed)
    encoders["random init"] = ElectraModel(ElectraConfig.from_pretrained(model_dirs[0]))
    results = {}
    for name, encoder in encoders.items():
        train_x, test_x = (word_features(encoder, f) for f in featurized)
        blocks = ["embeddings"] + [f"layer {depth}" for depth in range(len(train_x) - 1)]
        results[name] = {block: probe_f1(train_x[depth], [t for s in kept[0] for t in s], test_x[depth], kept[1],
                                         tag_names) for depth, block in enumerate(blocks)}
        print(f"{name}: " + ", ".join(f"{block} {f1:.2f}" for block, f1 in results[name].items()), flush=True)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dirs", type=Path, nargs="+", help="HF ELECTRA exports (config.json, weights, vocab.txt)")
    parser.add_argument("--train", type=Path, default=CONLL / "train.txt", help="the probe's training CoNLL file")
    parser.add_argument("--test", type=Path, default=CONLL / "test.txt", help="the CoNLL file it is scored on")
    parser.add_argument("--train-sentences", type=int, default=2000, help="training sentences read (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random-init encoder")
    parser.add_argument("--output", type=Path, help="also write {encoder: {hidden state: F1}} here as JSON")
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    results = probe(args.model_dirs, args.train, args.test, args.train_sentences, args.seed)
    if args.output:
        args.output.write_text(json.dumps({"train_sentences": args.train_sentences, "seed": args.seed,
                                           "chunk_f1": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
