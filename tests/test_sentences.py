"""The sentence splitter: the English rule (unchanged on English Wikipedia) and caseless scripts."""

import hashlib

import pytest

from pretrain_data.sentences import split_sentences


@pytest.mark.parametrize("text, expected", [
    ("It rained. Then it stopped.", ["It rained.", "Then it stopped."]),
    ("Mr. Smith met J. R. R. Tolkien in the U.S. in 1950. He left.",
     ["Mr. Smith met J. R. R. Tolkien in the U.S. in 1950.", "He left."]),
    ('He said "Go!" Then he went. 3 days later (ok).',
     ['He said "Go!"', "Then he went.", "3 days later (ok)."]),
    ("no break here e.g. this one", ["no break here e.g. this one"]),
    ("Born c. 1900. Died 1950.", ["Born c. 1900.", "Died 1950."]),
    # Chinese and Japanese: full stops with no space after them; a quote closed after one stays
    # inside its sentence unless whitespace or another quote follows.
    ("今天下雨了。我们在家！你呢？好的", ["今天下雨了。", "我们在家！", "你呢？", "好的"]),
    ("本当！？次です", ["本当！？", "次です"]),
    ("「はい。」と彼は言った。「行こう。」「うん。」", ["「はい。」と彼は言った。", "「行こう。」", "「うん。」"]),
    ("他说：“走吧。” 我们走了。", ["他说：“走吧。”", "我们走了。"]),
    # Korean and Arabic end sentences with Latin marks, between letters of their own scripts.
    ("나는 집에 간다. 그는 학교에 간다. 끝", ["나는 집에 간다.", "그는 학교에 간다.", "끝"]),
    ("هل أنت بخير؟ نعم. شكرا", ["هل أنت بخير؟", "نعم.", "شكرا"]),
    # Hindi: the danda and the double danda.
    ("वह घर गया। फिर वह सो गया॥ अंत", ["वह घर गया।", "फिर वह सो गया॥", "अंत"]),
    # A Latin word before the period keeps the English rule: no break before a caseless letter.
    ("It is called. 東京 in Japanese.", ["It is called. 東京 in Japanese."]),
])
def test_sentence_splitter(text, expected):
    assert split_sentences(text) == expected


def paragraphs(path):
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("<doc") and line != "</doc>"]


# The files of the shared Wikipedia sample where the rules for caseless scripts add breaks.
CHANGED = ("wiki_38", "wiki_52", "wiki_59")


def test_english_wikipedia_splits_as_under_the_english_rule_alone(corpus_dir):
    """On 77 of the sample's 80 files the sentences are exactly those of the English rule alone
    (the count and hash of its output, taken before the other rules were added)."""
    digest, count = hashlib.sha256(), 0
    for path in sorted(corpus_dir.iterdir()):
        if path.name not in CHANGED:
            for paragraph in paragraphs(path):
                for sentence in split_sentences(paragraph):
                    digest.update(sentence.encode() + b"\n")
                    count += 1
    assert (count, digest.hexdigest()) == (
        619764, "031101a7cf7fe6ba701dac61c62996c189ace25fe57dac6d71d7d8796275b8d6")


@pytest.mark.parametrize("name, inside, lengths", [
    # The English rule: [70, 25]; the Chinese question now ends at its full-width "？".
    ("wiki_38", "你的汽车是不是红色的？", [34, 35, 25]),
    # The English rule: one sentence of 962 characters; a Hebrew passage's sentences now split.
    ("wiki_52", "וּמִן סְאוֹבֲתָא.", [141, 201, 151, 121, 250, 93]),
    # The English rule: [181, 93, 30]; a Japanese title ends with "。".
    ("wiki_59", "アニマル惑星(プラネット)｣。", [82, 99, 93, 30]),
])
def test_the_other_three_files_gain_breaks_only_in_caseless_scripts(corpus_dir, name, inside, lengths):
    found = [paragraph for paragraph in paragraphs(corpus_dir / name) if inside in paragraph]
    assert len(found) == 1
    assert [len(sentence) for sentence in split_sentences(found[0])] == lengths


def test_the_english_rules_alone_split_as_builds_before_them(corpus_dir):
    """`rules="english"` on all 80 files: the count and hash of the splitter's output before the
    rules for caseless scripts were added (what the replication's data was built with)."""
    digest, count = hashlib.sha256(), 0
    for path in sorted(corpus_dir.iterdir()):
        for paragraph in paragraphs(path):
            for sentence in split_sentences(paragraph, rules="english"):
                digest.update(sentence.encode() + b"\n")
                count += 1
    assert (count, digest.hexdigest()) == (
        644588, "6b47903ffab288e193b0d325510f3390a56372f7fa233ed4edc4c0461a8fb431")
    assert split_sentences("今天下雨了。我们在家！", rules="english") == ["今天下雨了。我们在家！"]


def test_unknown_rules_are_refused():
    """A misspelt rule set is an error, not the "all" rules by default."""
    with pytest.raises(ValueError, match=r"rules='English': expected one of all, english"):
        split_sentences("It rained. Then it stopped.", rules="English")
