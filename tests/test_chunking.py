"""CoNLL-2000 chunking: reader counts on the real files, BIOES conversion, first-sub-token features,
conlleval's chunk F1 on a hand-checked example, the tagging head against NumPy, a few training steps."""

import re
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.errors import InputError
from electra_tf.modeling import BertConfig, build_encoder
from electra_tf.modeling.layer_utils import build_in_scope
from electra_tf.tokenization import Tokenizer
from finetune import chunking
from finetune.task import EvalSplit
from finetune.tasks import get_task
from finetune.config import FinetuningConfig
from finetune.runner import run


@pytest.fixture(scope="module")
def conll(shared_data):
    return shared_data / "conll2000"


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return Tokenizer(vocab_file, do_lower_case=True)


def test_reader_counts_and_held_out_dev(conll):
    train = chunking.read_sentences(conll / "train.txt")
    test = chunking.read_split(conll, "test")
    assert (len(train), sum(len(s.words) for s in train)) == (8936, 211727)  # MANIFEST.md
    assert (len(test), sum(len(s.words) for s in test)) == (2012, 47377)
    assert train[0].words[:3] == ("Confidence", "in", "the") and train[0].tags[:3] == ("B-NP", "B-PP", "B-NP")
    kept, dev = chunking.read_split(conll, "train"), chunking.read_split(conll, "dev")
    assert (len(kept), len(dev)) == (8043, 893)  # the last int(8936 / 10) sentences are dev
    assert dev[0].words == train[8043].words and dev[-1].words == train[-1].words
    assert [s.eid for s in dev[:3]] == [0, 1, 2]
    mapping = chunking.label_mapping(kept, dev, test)
    # 11 chunk types x BIOES + O = 45, less I-LST, I-SBAR and S-UCP, which never occur
    assert len(mapping) == 42 and list(mapping)[:3] == ["B-ADJP", "B-ADVP", "B-CONJP"]
    assert (mapping["O"], mapping["S-VP"]) == (31, 41) and "I-SBAR" not in mapping


def test_bad_lines_are_input_errors(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("Confidence NN B-NP\nin\n\n")
    with pytest.raises(InputError, match=r"train.txt:2: expected"):
        chunking.read_sentences(path)
    path.write_text("Confidence NN X-NP\n\n")
    with pytest.raises(InputError, match=r"train.txt:1: tag 'X-NP'"):
        chunking.read_sentences(path)
    with pytest.raises(InputError, match="no test file"):
        chunking.read_split(tmp_path, "test")
    path.write_text("Confidence NN B-NP\nin IN\n\n")  # a tag left out: its POS would be read as the tag
    with pytest.raises(InputError, match=r"train.txt:2: 2 fields, but line 1 has 3"):
        chunking.read_sentences(path)


def test_tab_separated_words_keep_their_spaces_and_no_break_spaces_stay_inside_words(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("New York\tNNP\tB-NP\r\nis\t\tVBZ\tB-VP\r\n \t \n10\u00a0000 CD B-NP\nmen NNS I-NP\n\u00a0\n"
                    "ok JJ B-ADJP\n", encoding="utf-8")  # tabs aligning columns; a line of a no-break space is blank
    first, second, third = chunking.read_sentences(path)
    assert (first.words, first.tags) == (("New York", "is"), ("B-NP", "B-VP"))
    assert (second.words, second.tags) == (("10\u00a0000", "men"), ("B-NP", "I-NP"))
    assert (third.words, third.tags) == (("ok",), ("B-ADJP",))


def test_bioes_and_conlleval_chunks_by_hand():
    assert chunking.to_bioes(["B-NP", "I-NP", "I-NP", "O", "B-VP", "B-NP", "I-PP"]) == \
        ["B-NP", "I-NP", "E-NP", "O", "S-VP", "S-NP", "S-PP"]
    # conlleval: a change of type or I after O starts a chunk (the original's decoder merged them)
    assert chunking.chunks(["B-VP", "I-NP", "I-NP"]) == {(0, 0, "VP"), (1, 2, "NP")}
    assert chunking.chunks(["O", "I-NP", "E-NP", "I-NP"]) == {(1, 2, "NP"), (3, 3, "NP")}
    gold = [["B-NP", "I-NP", "B-VP", "B-PP", "B-NP", "I-NP", "O"], ["I-NP", "O", "B-ADJP"], ["O", "O"]]
    predicted = [["B-NP", "B-NP", "B-VP", "I-VP", "B-NP", "I-NP", "O"], ["B-NP", "O", "I-ADJP"], ["B-NP", "O"]]
    # gold chunks 4 + 2 + 0 = 6, predicted 4 + 2 + 1 = 7, correct: NP(4,5); NP(0,0), ADJP(2,2) = 3
    scores = chunking.chunk_f1(gold, predicted)
    assert scores["precision"] == pytest.approx(300 / 7)
    assert scores["recall"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(600 / 13)  # 2 * 3 / (6 + 7)
    assert chunking.chunk_f1(gold, gold) == {"precision": 100.0, "recall": 100.0, "f1": 100.0}
    # the original's scorer: only B-, S- or O end a chunk, which takes its last tag's type
    assert chunking.original_chunks(["B-VP", "I-NP", "I-NP"]) == {(0, 2, "NP")}
    assert chunking.original_chunks(["O", "I-NP", "E-NP", "I-NP"]) == {(1, 3, "NP")}
    assert chunking.original_chunks(["S-NP", "I-NP", "B-VP", "E-VP", "O", "S-PP"]) == \
        {(0, 1, "NP"), (2, 3, "VP"), (5, 5, "PP")}
    assert chunking.chunk_f1(gold, predicted, conlleval=False) == scores  # well-formed enough: the same here
    merged = chunking.chunk_f1([["B-NP", "I-NP", "I-NP"]], [["B-VP", "I-NP", "I-NP"]], conlleval=False)
    assert merged["f1"] == 100.0 and chunking.chunk_f1([["B-NP", "I-NP", "I-NP"]], [["B-VP", "I-NP", "I-NP"]])[
        "f1"] == 0.0


def test_featurize_labels_first_sub_tokens(conll, tokenizer):
    test = chunking.read_split(conll, "test")
    mapping = chunking.label_mapping(test)
    features = chunking.featurize(test, tokenizer, 256, mapping)
    assert features.words_cut == 0 and len(features) == 2012
    tokens = tokenizer.convert_ids_to_tokens(features.token_ids[0])
    assert tokens[:4] == ["[CLS]", "rockwell", "international", "corp"] and tokens[-1] == "[SEP]"
    assert all(np.all(s == 1) for s in features.segment_ids)
    for sentence, positions, ids in zip(test[:200], features.labeled_positions, features.token_ids):
        assert len(positions) == len(sentence.words)
        for word, position in zip(sentence.words, positions):  # a word's first piece, no "##"
            first = tokenizer.convert_ids_to_tokens([ids[position]])[0]
            assert not first.startswith("##") and (first == "[UNK]" or word.lower().startswith(first[:1]))
    # gold labels through the scorer: every chunk recovered
    assert chunking.score(features, features.labels, mapping)["f1"] == 100.0
    short = chunking.featurize(test[:50], tokenizer, 24, mapping)
    assert max(len(ids) for ids in short.token_ids) <= 24 and short.words_cut > 0
    kept = sum(len(p) for p in short.labeled_positions)
    assert kept + short.words_cut == sum(len(s.words) for s in test[:50])
    assert features.cut == 0 and short.cut == sum(len(p) < len(s.words) for p, s in zip(short.labeled_positions,
                                                                                       test[:50])) > 0


def test_a_word_the_tokenizer_drops_whole_keeps_a_position_and_tag_of_its_own(tokenizer):
    """U+200B alone gives WordPiece no token: it stands as one [UNK], so neither it nor the next
    word loses its tag (the original gave it no token, and its tag fell on the next word's piece)."""
    sentence = chunking.Sentence(0, ("he", "\u200b", "said", "it"), ("B-NP", "O", "B-VP", "B-NP"))
    mapping = chunking.label_mapping([sentence])
    features = chunking.featurize([sentence], tokenizer, 32, mapping)
    assert tokenizer.convert_ids_to_tokens(features.token_ids[0]) == ["[CLS]", "he", "[UNK]", "said", "it", "[SEP]"]
    assert features.labeled_positions[0].tolist() == [1, 2, 3, 4]
    names = {index: tag for tag, index in mapping.items()}
    assert [names[i] for i in features.labels[0]] == ["S-NP", "O", "S-VP", "S-NP"]


def test_a_tag_outside_the_mapping_names_the_file_and_line(conll, tokenizer):
    test = chunking.read_split(conll, "test")
    lines = (conll / "test.txt").read_text().split("\n")
    for sentence in test[:100]:  # each sentence's source is the line of its first word
        path, line = sentence.source.rsplit(":", 1)
        assert path == str(conll / "test.txt") and lines[int(line) - 1].split()[0] == sentence.words[0]
    narrow = chunking.label_mapping(test[:1])
    unseen = next(s for s in test if not set(chunking.to_bioes(s.tags)) <= set(narrow))
    with pytest.raises(InputError, match=re.escape(unseen.source) + r": tag \S+ \(BIOES\) is not in the label mapping"):
        chunking.featurize([unseen], tokenizer, 256, narrow)


def test_head_loss_matches_numpy_and_trains(conll, tokenizer):
    sentences = chunking.read_split(conll, "train", max_sentences=16)
    mapping = chunking.label_mapping(sentences)
    features = chunking.featurize(sentences, tokenizer, 64, mapping)
    batch = chunking.tagging_batch(features, list(range(16)))
    tf_keras.utils.set_random_seed(3)
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    encoder = build_encoder(config)
    head = chunking.TaggingHead("chunk", len(mapping), 32)
    build_in_scope(head, None, "task_specific")
    assert sorted(v.name for v in head.variables) == ["task_specific/chunk/dense/bias:0",
                                                      "task_specific/chunk/dense/kernel:0"]
    sequence = encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    logits = head(sequence, batch)
    loss = head.per_example_loss(logits, batch).numpy()
    # NumPy: gather the first sub-tokens, dense, log-softmax, sum over real words
    h = np.take_along_axis(sequence.numpy(), batch["labeled_positions"][..., None], axis=1)
    z = h @ head.dense.kernel.numpy() + head.dense.bias.numpy()
    log_p = z - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) - z.max(-1, keepdims=True)
    picked = np.take_along_axis(log_p, batch["tag_ids"][..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(loss, -(picked * batch["labels_mask"]).sum(-1), rtol=1e-5)
    optimizer = tf_keras.optimizers.Adam(1e-3)
    variables = encoder.trainable_variables + head.trainable_variables
    losses = []
    for _ in range(8):
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(head.per_example_loss(
                head(encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"], training=True), batch),
                batch))
        optimizer.apply_gradients(zip(tape.gradient(total, variables), variables))
        losses.append(float(total))
    assert losses[-1] < 0.7 * losses[0]
    predicted = head.predictions(head(encoder(batch["input_ids"], batch["input_mask"], batch["segment_ids"]), batch))
    scores = chunking.score(features, [p for p in predicted.numpy()], mapping)
    assert set(scores) == {"precision", "recall", "f1"}
    assert 0.0 < scores["f1"] <= 100.0  # on the batch it trained on, it finds some chunks
    precision, recall = scores["precision"], scores["recall"]
    assert scores["f1"] == pytest.approx(2 * precision * recall / (precision + recall))


def test_chunk_task_interface(conll, tokenizer, tmp_path):
    (tmp_path / "chunk").mkdir()
    for name in ("train.txt", "test.txt"):
        (tmp_path / "chunk" / name).symlink_to(conll / name)
    task = get_task("chunk", root=str(tmp_path))
    config = SimpleNamespace(max_seq_length=task.presets["max_seq_length"], raw_data_dir=str(tmp_path),
                             do_lower_case=True, conlleval_chunks=False)
    dev = task.read(config, "dev", 30)
    features = task.featurize(dev, tokenizer, config, task_id=1, split="dev")
    assert len(features) == 30 and set(features.task_id) == {1} and len(task.mapping) == 42
    assert set(task.make_batch(features, [0, 3])) >= set(task.batch_spec)
    assert task.make_head(config, 16).dense.units == 42
    split = EvalSplit(1, task, "dev", "", dev, features)
    assert task.score(config, split, features.labels, 0.5)["f1"] == 100.0


def test_run_finetuning_chunk_end_to_end(conll, vocab_file, tmp_path):
    (tmp_path / "vocab.txt").symlink_to(vocab_file)
    (tmp_path / "finetuning_data" / "chunk").mkdir(parents=True)
    (tmp_path / "finetuning_data" / "chunk" / "train.txt").symlink_to(conll / "train.txt")
    assert FinetuningConfig.from_hparams("tiny", tmp_path, {"model_size": "tiny"}).max_seq_length == 256
    config = FinetuningConfig.from_hparams("tiny", tmp_path, dict(
        task_names=["chunk"], model_size="tiny", random_init=True, max_seq_length=64, max_examples=48,
        train_batch_size=16, eval_batch_size=16, num_train_epochs=2.0, iterations_per_loop=3, learning_rate=2e-3))
    with open(tmp_path / "log.txt", "w") as stream:
        document = run(config, stream)
    scores = document["trials"][0]["chunk"]
    assert list(scores) == ["f1", "precision", "recall", "loss"] and 0.0 <= scores["f1"] <= 100.0
    precision, recall = scores["precision"], scores["recall"]
    assert scores["f1"] == pytest.approx(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    assert np.isfinite(scores["loss"]) and scores["loss"] > 0
    assert "epoch 2.00 dev: chunk f1" in (tmp_path / "log.txt").read_text()
