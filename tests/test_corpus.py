"""spacy_fofe.CachedCorpus.v1: spacy.Corpus.v1's examples, with the .spacy file read only once."""

import pytest
import spacy
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Corpus
from spacy.util import registry

ARGS = {"gold_preproc": False, "max_length": 0, "limit": 0, "augmenter": None}


def write_corpus(path, nlp):
    docs = []
    for text, spans in [("Die Universität Köln liegt am Rhein .", [(0, 3, "ORG"), (2, 3, "LOC"), (5, 6, "LOC")]),
                        ("", []), ("Angela Merkel", [(0, 2, "PER")])]:
        doc = nlp(text)
        doc.spans["sc"] = [Span(doc, start, end, label) for start, end, label in spans]
        docs.append(doc)
    DocBin(docs=docs).to_disk(path)


def summary(examples):
    return [(eg.reference.text, [(s.start, s.end, s.label_) for s in eg.reference.spans["sc"]],
             [t.text for t in eg.predicted]) for eg in examples]


@pytest.fixture
def count_reads(monkeypatch):
    """The number of times spaCy's Corpus.read_docbin (the disk read under CachedCorpus) runs."""
    reads = []
    read_docbin = Corpus.read_docbin

    def counted(self, vocab, locs):
        reads.append(1)
        return read_docbin(self, vocab, locs)

    monkeypatch.setattr(Corpus, "read_docbin", counted)
    return reads


def test_cached_reader_gives_spacys_examples_and_reads_the_file_once(tmp_path, count_reads):
    nlp = spacy.blank("de")
    path = tmp_path / "train.spacy"
    write_corpus(path, nlp)
    expected = summary(registry.readers.get("spacy.Corpus.v1")(path, **ARGS)(nlp))
    assert expected[0][1] == [(0, 3, "ORG"), (2, 3, "LOC"), (5, 6, "LOC")] and len(expected) == 2  # empty doc skipped
    assert len(count_reads) == 1
    corpus = registry.readers.get("spacy_fofe.CachedCorpus.v1")(path, **ARGS)
    first = list(corpus(nlp))
    assert summary(first) == expected
    second = list(corpus(nlp))
    # a second corpus object over the same file, as `spacy train` makes one for initialize and one
    # for the training loop, shares the docs read
    third = list(registry.readers.get("spacy_fofe.CachedCorpus.v1")(path, **ARGS)(nlp))
    assert summary(second) == summary(third) == expected
    assert len(count_reads) == 2
    # fresh predicted docs on each pass (a pass may annotate them); the references are the kept docs
    assert all(a.predicted is not b.predicted for a, b in zip(first, second))
    assert all(a.reference is b.reference is c.reference for a, b, c in zip(first, second, third))
    list(corpus(spacy.blank("de")))  # another vocab means reading again
    assert len(count_reads) == 3


def test_cached_reader_reads_a_rewritten_file_again(tmp_path):
    nlp = spacy.blank("de")
    path = tmp_path / "train.spacy"
    write_corpus(path, nlp)
    corpus = registry.readers.get("spacy_fofe.CachedCorpus.v1")(path, **ARGS)
    assert len(list(corpus(nlp))) == 2
    DocBin(docs=[nlp("Nur ein Satz .")]).to_disk(path)
    assert [eg.reference.text for eg in corpus(nlp)] == ["Nur ein Satz ."]
    path.unlink()
    with pytest.raises(FileNotFoundError):
        list(corpus(nlp))


def test_limit_and_missing_path_behave_as_in_spacy(tmp_path):
    nlp = spacy.blank("de")
    path = tmp_path / "train.spacy"
    write_corpus(path, nlp)
    limited = registry.readers.get("spacy_fofe.CachedCorpus.v1")(path, **{**ARGS, "limit": 1})
    assert len(list(limited(nlp))) == len(list(limited(nlp))) == 1
    with pytest.raises(ValueError, match="E913"):
        registry.readers.get("spacy_fofe.CachedCorpus.v1")(None, **ARGS)
    (tmp_path / "train.conll").write_text("Ann B-PER\n")  # spaCy's reader would warn and read no docs
    with pytest.raises(ValueError, match="train.conll is not a .spacy file"):
        registry.readers.get("spacy_fofe.CachedCorpus.v1")(tmp_path / "train.conll", **ARGS)


def test_sentence_starts_reach_the_predicted_docs_through_the_alignment(tmp_path):
    nlp = spacy.blank("en")
    words = ["BRUSSELS", "1996-08-22", "EU", "rejects", "it", ".", "Peter", "Blackburn"]
    starts = [True, False, True, False, False, False, True, False]
    unknown = Doc(nlp.vocab, words=words, sent_starts=starts)  # CoNLL's tokens, spacing unknown
    known = Doc(nlp.vocab, words=words, spaces=[True] * 8, sent_starts=starts)  # re-tokenized from text
    plain = Doc(nlp.vocab, words=["No", "starts"])
    DocBin(docs=[unknown, known, plain]).to_disk(tmp_path / "docs.spacy")
    reader = registry.resolve({"r": {"@readers": "spacy_fofe.CachedCorpus.v1", "path": str(tmp_path / "docs.spacy"),
                                     **ARGS, "sentence_starts": True}})["r"]
    first, second, third = list(reader(nlp))
    assert [t.is_sent_start for t in first.predicted] == starts
    # The text is split differently ("1996-08-22" into 5 tokens): each sentence still starts at its word.
    assert len(second.predicted) == len(words) + 4
    assert [t.text for t in second.predicted if t.is_sent_start] == ["BRUSSELS", "EU", "Peter"]
    assert not third.predicted.has_annotation("SENT_START")
    # Off by default, as in spacy.Corpus.v1: the predicted docs carry no sentence starts.
    plain_reader = registry.resolve({"r": {"@readers": "spacy_fofe.CachedCorpus.v1",
                                           "path": str(tmp_path / "docs.spacy"), **ARGS}})["r"]
    assert not any(eg.predicted.has_annotation("SENT_START") for eg in plain_reader(nlp))
