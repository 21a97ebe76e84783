"""`chunk`, CoNLL-2000 chunking, as the original fine-tunes it: a preset of the tagging type.

It keeps the original's ways where they differ from a user's tagging task (`finetune.chunking`):
the files are `finetuning_data/chunk/{train,dev,test}.txt` (without dev.txt the last tenth of
train is the dev split), words are always lower-cased, the tags are the BIOES tags found in every
split present, chunks are scored as the original's scorer reads them (`conlleval_chunks` for
conlleval's rules) and with no per-type scores. Like every tagging task it trains on 256 tokens
when alone (the original's preset for chunk, `TaggingTask.presets`).
"""

import functools
from pathlib import Path
from typing import Dict, List, Optional

from finetune import chunking
from finetune.tagging import TaggingTask
from finetune.task import EvalSplit


class ChunkPreset(TaggingTask):
    def __init__(self, root: Optional[str], tags: Optional[List[str]] = None):
        super().__init__(chunking.TASK_NAME, root, {}, scheme="iob2", tags=tags)

    @property
    def task_dir(self) -> Path:
        return Path(self.root) / self.name

    def read(self, config, split: str, max_examples: Optional[int]) -> List[chunking.Sentence]:
        return chunking.read_split(self.task_dir, split, max_examples)

    @property
    def tags(self) -> List[str]:
        if self._tags is None:
            self._tags = list(_chunk_labels(str(self.task_dir)))
        return self._tags

    def own_format(self, suffix: str) -> Optional[str]:
        return "conll" if suffix == ".txt" else None  # CoNLL-2000's own files

    uncased_words = True  # the original lower-cases its tagging words whatever do_lower_case says

    def score(self, config, split: EvalSplit, predictions, loss: float) -> Dict[str, float]:
        scores = chunking.score(split.features, predictions, self.mapping, config.conlleval_chunks)
        return {"f1": scores["f1"], **scores, "loss": float(loss)}  # the first key is the main score


@functools.lru_cache(maxsize=4)
def _chunk_labels(directory: str) -> Dict[str, int]:
    """The label mapping of a chunk data directory (read once per run)."""
    splits = [chunking.read_split(directory, "train"), chunking.read_split(directory, "dev")]
    if (Path(directory) / "test.txt").is_file():
        splits.append(chunking.read_split(directory, "test"))
    return chunking.label_mapping(*splits)
