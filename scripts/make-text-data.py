"""Writes the synthetic text-classification data of examples/text-classification.kdl:
reviews.csv and the BPE tokenizer reviews-tokenizer.json trained on it.

reviews.csv has a header `text,label` and 4000 rows: one short lowercase English "review"
and its label, `positive`, `negative` or `neutral` (written with Python's csv module, so a
text holding a comma is quoted). Each review is built from these parts:

    [opener] CLAUSE [", but" CLAUSE] [closer] [end mark]

    CLAUSE   = SUBJECT [MODIFIER] VERB [NEGATION] [INTENSIFIER] ADJECTIVE
               e.g. "the plot was really dreadful", "this film did not seem so great"
    SUBJECT  = the movie, this film, the plot, the acting, the soundtrack, the ending, ...
    MODIFIER = that i saw last week, of the second half, at the festival, ...
    VERB     = was, is, felt, seemed (negated as "was not", "was never", "was hardly",
               "wasn't", "did not feel", "never felt", "hardly seemed", ...)
    ADJECTIVE from one of three sets of 10: positive (great, wonderful, superb, ...),
               negative (awful, boring, dreadful, ...), neutral (okay, average, fine, ...)
    opener   = zero to two filler phrases ("i think", "to be honest,", "if you ask me,",
               "overall,", ...), closer = zero to two ("and the popcorn was cold",
               ", if you ask me", "in the end", ...); fillers carry no sentiment, and only
               shift where the sentiment words stand and how long the text is.

The rules for the label:

  1. A clause's sentiment is its adjective's set; a negation (not / never / hardly /
     n't) flips positive <-> negative, and leaves neutral neutral.
  2. A review of one clause has that clause's sentiment.
  3. In a review of two clauses joined by ", but" (about a quarter of them), the second
     clause decides the label; the first one is a distractor that reads (rule 1) as
     another sentiment than the label.

The label of each review is drawn first, uniformly, so the classes are balanced (up to
chance), and the clause built to express it (a positive review negates a negative
adjective a third of the time, and so on). Reviews are 4 to 33 words long (median 13),
6 to 58 tokens with the tokenizer below, [CLS] and [SEP] included (median 20, 95th
percentile 38, 99th 45).

reviews-tokenizer.json is a Hugging Face `tokenizers` file trained on those texts: normalizer
NFD + Lowercase + StripAccents; pre-tokenizer Whitespace (splits punctuation off words, so
",", "'", "." and "!" are tokens of their own); a plain BPE model (vocab_size 300,
min_frequency 2; no continuing-subword prefix or end-of-word suffix, and no decoder, so
decoding joins subwords with spaces: the file is for encoding); special tokens [PAD] = 0,
[UNK] = 1, [CLS] = 2, [SEP] = 3; a TemplateProcessing post-processor that makes
"[CLS] $A [SEP]" (and "[CLS] $A [SEP] $B [SEP]" for pairs). Padding and truncation are not
enabled in the file: whoever loads it sets them.

Both files are written to a temporary file and renamed into place; nothing is printed. The
same bytes are written on every run: the RNG is seeded, and BPE training is deterministic
as configured. (It is not with an end-of-word suffix or a continuing-subword prefix: the
trainer of tokenizers 0.23.2 numbers the suffixed / prefixed characters in the iteration
order of a randomly seeded hash map, so their ids change from run to run, and with them
the order of merges whose counts tie. Bare characters are numbered in sorted order, and
the merged tokens in merge order, ties broken by those ids.)

Usage: python make-text-data.py OUT_CSV OUT_TOKENIZER_JSON   (deterministic: seeded)
"""

import csv
import os
import random
import sys

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

SAMPLES = 4000
SEED = 0
LABELS = ("positive", "negative", "neutral")
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]  # ids 0, 1, 2, 3, in this order
VOCAB_SIZE = 300
MIN_FREQUENCY = 2

SUBJECTS = [
    "the movie", "this film", "the plot", "the acting", "the soundtrack", "the ending",
    "the script", "the cast", "the dialogue", "the story", "the pacing", "the camera work",
    "the set design", "the lead actor", "this sequel", "the whole thing",
]
ADJECTIVES = {
    "positive": ["great", "wonderful", "superb", "brilliant", "excellent", "delightful",
                 "fantastic", "amazing", "charming", "enjoyable"],
    "negative": ["awful", "boring", "dreadful", "terrible", "dull", "horrible", "tedious",
                 "disappointing", "bland", "painful"],
    "neutral": ["okay", "average", "fine", "ordinary", "passable", "acceptable",
                "unremarkable", "standard", "middling", "so-so"],
}
# Each verb, plain and in its negated forms.
VERBS = {
    "was": ["was not", "was never", "was hardly", "wasn't"],
    "is": ["is not", "is never", "is hardly", "isn't"],
    "felt": ["did not feel", "never felt", "hardly felt", "didn't feel"],
    "seemed": ["did not seem", "never seemed", "hardly seemed", "didn't seem"],
}
# Optional, after the subject: "the plot of the second half was ...".
SUBJECT_MODIFIERS = [
    "that i saw last week", "everyone keeps talking about", "of the second half",
    "in the director's cut", "at the festival", "in the new version", "on the big screen",
    "my sister picked",
]
INTENSIFIERS = ["really", "very", "quite", "so", "truly", "pretty", "rather", "a bit"]
OPENERS = [
    "i think", "to be honest,", "if you ask me,", "overall,", "honestly,", "well,",
    "in my opinion,", "frankly,", "i have to say", "after all the hype,",
    "for what it's worth,", "my friend said", "i guess", "as expected,", "on the whole,",
]
CLOSERS = [
    "and the popcorn was cold", ", if you ask me", "in the end", ", overall",
    "from start to finish", ", as far as i can tell", "and the theater was crowded",
    "on a rainy sunday", ", to be honest", "for a friday night", ", at least for me",
    "and it ran two hours",
]
END_MARKS = [".", ".", ".", "!", "...", ""]
FLIP = {"positive": "negative", "negative": "positive", "neutral": "neutral"}


def clause(rng: random.Random, sentiment: str, negated: bool) -> str:
    """One clause whose adjective has `sentiment` (before negation)."""
    verb = rng.choice(list(VERBS))
    words = [rng.choice(SUBJECTS)]
    if rng.random() < 0.3:
        words.append(rng.choice(SUBJECT_MODIFIERS))
    words.append(rng.choice(VERBS[verb]) if negated else verb)
    if rng.random() < 0.5:
        words.append(rng.choice(INTENSIFIERS))
    words.append(rng.choice(ADJECTIVES[sentiment]))
    return " ".join(words)


def expressing(rng: random.Random, label: str) -> tuple[str, bool]:
    """An adjective set and whether to negate it, such that the clause reads as `label`."""
    negated = rng.random() < 1 / 3
    return (FLIP[label] if negated else label), negated


def review(rng: random.Random, label: str) -> str:
    sentiment, negated = expressing(rng, label)
    text = clause(rng, sentiment, negated)
    if rng.random() < 0.25:
        other = rng.choice([s for s in LABELS if s != label])
        text = clause(rng, *expressing(rng, other)) + ", but " + text
    openers = rng.choices(OPENERS, k=rng.choice([0, 0, 1, 1, 1, 2]))
    text = " ".join(openers + [text])
    for closer in rng.sample(CLOSERS, k=rng.choice([0, 0, 1, 1, 2])):
        text += closer if closer.startswith(",") else " " + closer
    return text + rng.choice(END_MARKS)


def tokenizer_for(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=MIN_FREQUENCY,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == i, (token, tokenizer.token_to_id(token))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))],
    )
    return tokenizer


def main(out_csv: str, out_tokenizer: str) -> None:
    rng = random.Random(SEED)
    rows = []
    for _ in range(SAMPLES):
        label = rng.choice(LABELS)
        rows.append((review(rng, label), label))

    tmp = out_csv + ".tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    os.replace(tmp, out_csv)

    tokenizer = tokenizer_for([text for text, _ in rows])
    tmp = out_tokenizer + ".tmp"
    tokenizer.save(tmp, pretty=True)
    os.replace(tmp, out_tokenizer)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: make-text-data.py OUT_CSV OUT_TOKENIZER_JSON")
    main(sys.argv[1], sys.argv[2])
