"""A small synthetic corpus and sentiment task that quickstart.py writes for itself.

The text is generated from a few templates, so it needs no download and no licence,
and it has the structure both pre-training tasks need: each document keeps to one
topic (so "is B the next sentence of A?" is answerable) and sentences follow a
grammar with topic-specific words (so masked words are predictable from context).
The sentiment task labels a review by the adjectives it uses.

Example:
>>> docs = documents(num_documents=2, seed=0)
>>> len(docs), all(len(doc) >= 4 for doc in docs)
(2, True)
"""

from __future__ import annotations

import random

TOPICS = {
    "harbour": (
        ["captain", "sailor", "fisherman", "harbour master", "pilot"],
        ["boat", "net", "anchor", "lighthouse", "cargo", "rope"],
        ["repaired", "loaded", "painted", "watched", "pulled", "tied"],
        ["at dawn", "before the storm", "near the pier", "in the fog", "after the tide turned"],
    ),
    "kitchen": (
        ["chef", "baker", "cook", "waiter", "apprentice"],
        ["bread", "soup", "oven", "knife", "pastry", "sauce"],
        ["baked", "stirred", "tasted", "sliced", "served", "burned"],
        ["before lunch", "at midnight", "for the guests", "in a hurry", "with great care"],
    ),
    "observatory": (
        ["astronomer", "student", "professor", "engineer", "technician"],
        ["telescope", "comet", "planet", "mirror", "star chart", "lens"],
        ["measured", "observed", "polished", "calibrated", "recorded", "photographed"],
        ["after sunset", "on a clear night", "during the eclipse", "through the dome", "until morning"],
    ),
    "orchard": (
        ["farmer", "gardener", "picker", "beekeeper", "neighbour"],
        ["apple", "ladder", "hive", "basket", "pear tree", "fence"],
        ["pruned", "picked", "carried", "planted", "watered", "sold"],
        ["in the autumn", "before the frost", "at harvest time", "under the rain", "every morning"],
    ),
}
POSITIVE = ["wonderful", "delightful", "excellent", "charming", "brilliant", "superb"]
NEGATIVE = ["dreadful", "boring", "terrible", "clumsy", "awful", "disappointing"]


def _sentence(rng: random.Random, topic: str) -> str:
    people, things, verbs, times = TOPICS[topic]
    person, thing, verb, time = rng.choice(people), rng.choice(things), rng.choice(verbs), rng.choice(times)
    other = rng.choice(things)
    pattern = rng.randrange(3)
    if pattern == 0:
        return f"The {person} {verb} the {thing} {time}."
    if pattern == 1:
        return f"{time.capitalize()}, the {person} {verb} the {thing} and the {other}."
    return f"Everyone said the {thing} was {verb} by the {person} {time}."


def documents(num_documents: int = 400, seed: int = 12345) -> list[list[str]]:
    """Documents of 4-12 sentences, each on a single random topic."""
    rng = random.Random(seed)
    topics = sorted(TOPICS)
    return [
        [_sentence(rng, topic) for _ in range(rng.randint(4, 12))]
        for topic in (rng.choice(topics) for _ in range(num_documents))
    ]


def write_corpus(path: str, num_documents: int = 400, seed: int = 12345) -> None:
    """The BERT corpus layout: one sentence a line, a blank line between documents."""
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents(num_documents, seed):
            handle.write("\n".join(doc) + "\n\n")


def _review(rng: random.Random) -> tuple[str, int]:
    label = rng.randrange(2)
    adjectives = POSITIVE if label else NEGATIVE
    topic = rng.choice(sorted(TOPICS))
    people, things, _, times = TOPICS[topic]
    text = (
        f"The {rng.choice(things)} made by the {rng.choice(people)} {rng.choice(times)} "
        f"was {rng.choice(adjectives)}, and the {rng.choice(things)} was {rng.choice(adjectives)} too."
    )
    return text, label


def write_sentiment_task(directory: str, train_size: int = 600, dev_size: int = 200, seed: int = 7) -> None:
    """train.tsv and dev.tsv with a `sentence<TAB>label` header, as GLUE's SST-2."""
    rng = random.Random(seed)
    for name, size in (("train.tsv", train_size), ("dev.tsv", dev_size)):
        with open(f"{directory}/{name}", "w", encoding="utf-8") as handle:
            handle.write("sentence\tlabel\n")
            for _ in range(size):
                text, label = _review(rng)
                handle.write(f"{text}\t{label}\n")
