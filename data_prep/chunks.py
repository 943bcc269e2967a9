"""The unit of parallel work: a chunk of consecutive documents in, framed TFRecords out.

A `ChunkProcessor` tokenizes a chunk, adds its documents to its `DocumentPool`,
packs `dupe_factor` rounds of instances (the original's loop order: every document
once per round), shuffles them, masks them and serializes them.

A chunk is also the NotNext pool: a NotNext segment B comes from another document of
the same chunk. Chunks are cut at byte positions of the corpus, and their random
streams are seeded by (random_seed, shard, the chunk's offset in the corpus), so a
chunk's records are a function of its own text, the options and its position only:
any number of workers, or a Beam pipeline, writes the same multiset of records.
"""

from __future__ import annotations

import random
from array import array
from collections import Counter
from dataclasses import dataclass

import numpy as np

from bert_tf.data.schema import (
    INPUT_MASK,
    MASKED_LM_IDS,
    MASKED_LM_POSITIONS,
    MASKED_LM_PROB,
    MASKED_LM_WEIGHTS,
    NEXT_SENTENCE_LABELS,
    WORD_CONTINUATION,
    feature_names,
    special_ids,
)
from bert_tf.tokenization import FullTokenizer
from data_prep.encoding import SentenceEncoder, continuation_table, chinese_word_segmenter
from data_prep.instances import DocumentPool, PackingOptions, PoolDocument, Recipes, chunk_tokens, pack_document
from data_prep.masking import InstanceBatch, MaskingOptions, assemble, mask_batch, word_continuation
from data_prep.tfrecord import FloatFeature, IntFeature, serialize_examples


@dataclass(frozen=True)
class GenerationOptions:
    """Everything that decides the content of the output (the original's flags and ours)."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = MASKED_LM_PROB
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345
    do_whole_word_mask: bool = False
    zh_whole_word_mask: bool = False
    dynamic_masking: bool = False
    use_v2_feature_names: bool = False
    # The NotNext pool (see DocumentPool), within a chunk: small enough that memory does
    # not grow with the corpus (~16 MB at most) even for a chunk of tiny documents.
    pool_documents: int = 1_000
    pool_tokens: int = 4_000_000

    @property
    def whole_word(self) -> bool:
        return self.do_whole_word_mask or self.zh_whole_word_mask


@dataclass
class ChunkTask:
    shard: int
    index: int  # its position: the corpus offset where its text starts
    documents: list[list[str]]  # each a list of sentences (lines)
    end_offset: int  # corpus byte offset where the chunk ends, for progress


@dataclass
class ChunkResult:
    shard: int
    index: int
    records: bytes  # framed TFRecords, back to back
    offsets: np.ndarray  # n + 1 record boundaries in `records`
    counts: Counter
    end_offset: int


class ChunkProcessor:
    """Turns `ChunkTask`s into `ChunkResult`s, each from its chunk alone."""

    def __init__(self, options: GenerationOptions, tokenizer: FullTokenizer):
        self.options = options
        vocab = tokenizer.vocab
        ids = special_ids(vocab)
        self._cls_id, self._sep_id = ids["cls_id"], ids["sep_id"]
        self._encoder = SentenceEncoder(tokenizer, chinese_word_segmenter() if options.zh_whole_word_mask else None)
        self._suffix_table = continuation_table(vocab)
        self._packing = PackingOptions(options.max_seq_length, options.short_seq_prob)
        self._masking = MaskingOptions(
            masked_lm_prob=options.masked_lm_prob,
            max_predictions_per_seq=options.max_predictions_per_seq,
            vocab_size=len(tokenizer.inv_vocab),
            mask_id=ids["mask_id"],
            whole_word=options.whole_word,
        )
        self._names = feature_names(options.use_v2_feature_names)
        self._pool = DocumentPool(options.pool_documents, options.pool_tokens)

    def process(self, task: ChunkTask) -> ChunkResult:
        # The pool holds this chunk's documents only: what another chunk holds depends on
        # which worker processed it before, hence on the worker count.
        self._pool.clear()
        counts: Counter = Counter()
        documents, chunk_ids = self._tokenize(task.documents, counts)
        seed = f"{self.options.random_seed}/{task.shard}/{task.index}"
        rng = random.Random(seed)
        np_rng = np.random.default_rng([self.options.random_seed, task.shard, task.index])
        recipes = Recipes()
        rounds = 1 if self.options.dynamic_masking else self.options.dupe_factor
        for _ in range(rounds):
            for document, base in documents:
                pack_document(document, base, self._pool, self._packing, rng, recipes)
        if not len(recipes):
            return ChunkResult(task.shard, task.index, b"", np.zeros(1, np.int64), counts, task.end_offset)
        batch = self._assemble(recipes, chunk_ids, np_rng)
        records, offsets = self._serialize(batch, np_rng, counts)
        return ChunkResult(task.shard, task.index, records, offsets, counts, task.end_offset)

    def _tokenize(self, texts: list[list[str]], counts: Counter) -> tuple[list[tuple[PoolDocument, int]], np.ndarray]:
        """Token ids of the chunk's documents in one array; the documents join the pool."""
        # One call for all the chunk's lines: whole-word masking flags them all at once.
        chunk_ids, lengths = self._encoder.encode_lines([line for lines in texts for line in lines])
        bounds: list[tuple[int, array]] = []
        line, base = 0, 0
        for lines in texts:
            starts = array("q", [0])
            for length in lengths[line : line + len(lines)].tolist():
                if length:  # as the original: a line without tokens is no sentence
                    starts.append(starts[-1] + length)
            line += len(lines)
            if len(starts) > 1:
                bounds.append((base, starts))
            base += starts[-1]
        documents = []
        for base, starts in bounds:
            document = PoolDocument(chunk_ids[base : base + starts[-1]], starts)
            self._pool.add(document)
            documents.append((document, base))
        counts["documents"] += len(documents)
        counts["sentences"] += sum(len(starts) - 1 for _, starts in bounds)
        return documents, chunk_ids

    def _assemble(self, recipes: Recipes, chunk_ids: np.ndarray, np_rng: np.random.Generator) -> InstanceBatch:
        tokens, b_start = chunk_tokens(recipes, chunk_ids)
        # The original shuffles all instances of the corpus; we shuffle the chunk's (so
        # the dupe_factor copies of a document part), and the writer shuffles more.
        order = np_rng.permutation(len(recipes))
        return assemble(
            tokens,
            np.frombuffer(recipes.a_start, dtype=np.int64)[order],
            np.frombuffer(recipes.a_length, dtype=np.int64)[order],
            b_start[order],
            np.frombuffer(recipes.b_length, dtype=np.int64)[order],
            np.frombuffer(recipes.is_random_next, dtype=np.int8)[order],
            self.options.max_seq_length,
            self._cls_id,
            self._sep_id,
        )

    def _serialize(
        self, batch: InstanceBatch, np_rng: np.random.Generator, counts: Counter
    ) -> tuple[bytes, np.ndarray]:
        names = self._names
        input_mask = (np.arange(self.options.max_seq_length)[None, :] < batch.lengths[:, None]).astype(np.int8)
        continuation = word_continuation(batch, self._suffix_table) if self.options.whole_word else None
        counts["instances"] += len(batch.lengths)
        counts["tokens"] += int(batch.lengths.sum())
        counts["not_next"] += int(batch.next_sentence_labels.sum())
        counts["short_instances"] += int((batch.lengths < self.options.max_seq_length / 2).sum())
        if self.options.dynamic_masking:
            features = [
                IntFeature(names.input_ids, batch.input_ids),
                IntFeature(INPUT_MASK, input_mask),
                IntFeature(names.segment_ids, batch.segment_ids),
                IntFeature(NEXT_SENTENCE_LABELS, batch.next_sentence_labels[:, None]),
            ]
            if continuation is not None:
                features.append(IntFeature(WORD_CONTINUATION, continuation.astype(np.int8)))
        else:
            masked = mask_batch(batch, continuation, self._masking, np_rng)
            counts["masked"] += masked.replaced + masked.kept + masked.random
            counts["replaced"] += masked.replaced
            counts["kept"] += masked.kept
            counts["random"] += masked.random
            ids_and_segments = [
                IntFeature(names.input_ids, masked.input_ids),
                IntFeature(INPUT_MASK, input_mask),
                IntFeature(names.segment_ids, batch.segment_ids),
            ]
            if self.options.use_v2_feature_names:  # Model Garden's order
                ids_and_segments = [ids_and_segments[0], ids_and_segments[2], ids_and_segments[1]]
            features = [
                *ids_and_segments,
                IntFeature(MASKED_LM_POSITIONS, masked.positions),
                IntFeature(MASKED_LM_IDS, masked.label_ids),
                FloatFeature(MASKED_LM_WEIGHTS, masked.weights),
                IntFeature(NEXT_SENTENCE_LABELS, batch.next_sentence_labels[:, None]),
            ]
        return serialize_examples(features)
