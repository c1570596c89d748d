"""Converters: column (IOB1/IOB2, nested) and JSON lines files to .spacy, and back."""

import json
import re

import pytest
import spacy
from spacy.tokens import DocBin
from spacy.training import Corpus
from spacy.vocab import Vocab
from typer.testing import CliRunner

from spacy_fofe.cli import fofe_cli
from spacy_fofe.cli.convert import (
    DUPLICATE,
    MISALIGNED,
    REPAIRED_TAGS,
    Record,
    convert,
    read_columns,
    read_jsonl,
    tags_to_spans,
)

NESTED_TSV = """# a comment line\tsource\t[2009]
Die\tO\tO
Universität\tB-ORG\tO
Toronto\tI-ORG\tB-LOC
#\tO\tO

-DOCSTART-\tO\tO


#tag\tB-OTH\tO
Paris\tI-LOC\tO
"""


def read_back(path):
    docs = list(DocBin().from_disk(path).get_docs(Vocab()))
    return [([t.text for t in d], sorted((s.start, s.end, s.label_) for s in d.spans["sc"]),
             [(e.start, e.end, e.label_) for e in d.ents]) for d in docs]


def test_iob2_invalid_sequences_start_a_span_and_are_counted():
    assert tags_to_spans(["O", "I-PER", "I-PER", "B-PER", "I-LOC"]) == ([(1, 3, "PER"), (3, 4, "PER"),
                                                                         (4, 5, "LOC")], 2)


def test_iob1_i_after_o_is_a_legal_start():
    assert tags_to_spans(["I-ORG", "I-ORG", "B-ORG", "O", "I-LOC"], "iob1") == (
        [(0, 2, "ORG"), (2, 3, "ORG"), (4, 5, "LOC")], 0)


def test_nested_columns_round_trip_with_comments_docstart_and_blank_lines(tmp_path):
    source = tmp_path / "nested.tsv"
    source.write_text(NESTED_TSV, encoding="utf8")
    report = convert(read_columns(source, 0, [1, 2], "iob2", "\t"), tmp_path / "out.spacy", max_length=1)
    docs = read_back(tmp_path / "out.spacy")
    assert docs[0] == (["Die", "Universität", "Toronto", "#"], [(1, 3, "ORG"), (2, 3, "LOC")], [(1, 3, "ORG")])
    assert docs[1][0] == ["#tag", "Paris"] and docs[1][1] == [(0, 1, "OTH"), (1, 2, "LOC")]
    assert len(docs) == 2
    doc = next(DocBin().from_disk(tmp_path / "out.spacy").get_docs(Vocab()))
    assert [(s.start, s.end) for s in doc.spans["sc_level1"]] == [(1, 3)]
    assert [(s.start, s.end) for s in doc.spans["sc_level2"]] == [(2, 3)]
    assert report.repaired == {REPAIRED_TAGS: 1} and not report.dropped and report.nested == 1
    assert report.longer_than_n == {"ORG": 1}
    assert "spans longer than n=1: 1" in report.summary()


def test_column_order_is_an_option(tmp_path):
    source = tmp_path / "swapped.tsv"
    source.write_text("B-PER x Ann\nI-PER x Lee\n", encoding="utf8")
    assert list(read_columns(source, token_column=2, tag_columns=[0])) == [Record(["Ann", "Lee"], [[(0, 2, "PER")]])]


def test_a_tag_column_not_read_is_reported_with_its_labels(tmp_path):
    source = tmp_path / "nested.tsv"
    # token, part of speech, outer level, inner level; "O" is a word class of the second column here
    source.write_text("Die\tO\tO\tO\nUniversität\tNN\tB-ORG\tO\nToronto\tNE\tI-ORG\tB-LOC\n\n"
                      "Bonn\tNE\tB-LOC\tO\nund\tKON\tO\tO\nParis\tNE\tB-LOC\tO\n", encoding="utf8")
    unread = {}
    records = read_columns(source, 0, [-1], "iob2", "\t", unread)
    assert [record.levels for record in records] == [[[(2, 3, "LOC")]], [[]]]
    assert unread == {2: {"ORG": 2, "LOC": 2}}  # tags per label
    unread = {}
    list(read_columns(source, 0, [2, 3], "iob2", "\t", unread))
    assert unread == {}
    done = run("convert", source, tmp_path / "inner.spacy", "--separator", "tab")
    assert done.exit_code == 0, done.output
    assert "column 2 also holds tags (ORG, LOC) and was not read" in " ".join(done.output.split())
    assert "--tag-columns 2,-1" in done.output
    done = run("convert", source, tmp_path / "both.spacy", "--separator", "tab", "--tag-columns", "2,3")
    assert done.exit_code == 0 and "not read" not in done.output


def test_too_few_columns_is_a_clear_error(tmp_path):
    source = tmp_path / "short.tsv"
    source.write_text("Ann\tB-PER\nLee\n", encoding="utf8")
    with pytest.raises(ValueError, match="has 1 columns"):
        list(read_columns(source, 0, [1], separator="\t"))


@pytest.mark.parametrize("separator,hint", [(None, True), ("\t", False)])
def test_a_line_with_other_columns_than_the_first_is_an_error_not_a_token_cut_short(tmp_path, separator, hint):
    # "New York" split on spaces would give the token "New" and drop "York" without a word.
    source = tmp_path / "ragged.tsv"
    source.write_text("EU\tB-ORG\nNew York\tB-LOC\n\n" if hint else "EU\tB-ORG\tO\nvisits\tO\n\n", encoding="utf8")
    message = r"ragged.tsv:2: .* has 3 columns where line 1 has 2.*--separator tab" if hint else "has 2 columns where"
    with pytest.raises(ValueError, match=message):
        convert(read_columns(source, 0, [1], separator=separator), tmp_path / "out.spacy")
    assert not (tmp_path / "out.spacy").exists()


def run(*args):
    return CliRunner().invoke(fofe_cli, [str(a) for a in args])


@pytest.mark.parametrize("options,message", [
    (["--tag-columns", "1,x"], "--tag-columns must be column numbers separated by commas (e.g. 1,2), got '1,x'"),
    (["--tag-columns", "2,-1"], "token column 0 and tag columns [2, -1] read one twice"),
    (["--tag-columns", "0"], "token column 0 and tag columns [0] read one twice"),
    (["--max-length", "0"], "--max-length must be at least 1, got 0"),
])
def test_convert_options_that_cannot_be_read_are_errors_and_nothing_is_written(tmp_path, options, message):
    source = tmp_path / "data.tsv"
    source.write_text("Ann\tB-PER\tB-PER\nLee\tI-PER\tI-PER\n\n", encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy", "--separator", "tab", *options)
    assert result.exit_code == 1 and message in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out.spacy").exists()


def test_jsonl_round_trip_and_cli(tmp_path):
    source = tmp_path / "data.jsonl"
    records = [{"tokens": ["Bank", "of", "Paris"], "spans": [[0, 3, "ORG"], [2, 3, "LOC"]]}, {"tokens": ["x"]}]
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf8")
    result = run("convert", source, tmp_path / "j.spacy", "--no-ents")  # .jsonl is read as JSON lines
    assert result.exit_code == 0, result.output
    assert "2 docs, 4 tokens, 2 spans (1 nested" in result.output and "DROPPED" not in result.output
    docs = read_back(tmp_path / "j.spacy")
    assert docs == [(["Bank", "of", "Paris"], [(0, 3, "ORG"), (2, 3, "LOC")], []), (["x"], [], [])]


def test_byte_order_mark_and_windows_line_ends_are_not_read_as_text(tmp_path):
    columns = tmp_path / "bom.tsv"
    columns.write_bytes(b"\xef\xbb\xbfEU\tB-ORG\r\nrejects\tO\r\n\r\nPeter\tB-PER\r\nBlackburn\tI-PER\r\n")
    convert(read_columns(columns, 0, [1], "iob2", "\t"), tmp_path / "c.spacy")
    assert read_back(tmp_path / "c.spacy") == [(["EU", "rejects"], [(0, 1, "ORG")], [(0, 1, "ORG")]),
                                               (["Peter", "Blackburn"], [(0, 2, "PER")], [(0, 2, "PER")])]
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes(b"\xef\xbb\xbf" + json.dumps({"tokens": ["Paris"], "spans": [[0, 1, "LOC"]]}).encode() + b"\r\n")
    assert [(r.words, r.levels) for r in read_jsonl(lines)] == [(["Paris"], [[(0, 1, "LOC")]])]


def test_convert_never_overwrites_its_input_and_writes_only_spacy_files(tmp_path):
    source = tmp_path / "train.spacy"  # a corpus that happens to have the suffix
    source.write_text("Ann\tB-PER\n", encoding="utf8")
    result = run("convert", source, tmp_path / "." / "train.spacy", "--separator", "tab")
    assert result.exit_code == 1 and "is the input file" in " ".join(result.output.split())
    assert source.read_text(encoding="utf8") == "Ann\tB-PER\n"
    result = run("convert", source, tmp_path / "train.docbin", "--separator", "tab")
    assert result.exit_code == 1 and "the output must be a .spacy file" in " ".join(result.output.split())
    assert not (tmp_path / "train.docbin").exists()


@pytest.mark.parametrize("name,content", [
    ("latin1.tsv", b"Ann\tB-PER\n\nM\xfcller\tB-PER\n"),
    ("latin1.jsonl", b'{"tokens": ["a"]}\n\n{"tokens": ["M\xfcller"]}\n'),
])
def test_a_file_that_is_not_utf8_is_an_error_naming_the_line_and_byte(tmp_path, name, content):
    source = tmp_path / name
    source.write_bytes(content)
    fmt = "jsonl" if name.endswith("jsonl") else "columns"
    result = run("convert", source, tmp_path / "out.spacy", "--format", fmt, "--tag-columns", "1")
    assert result.exit_code == 1
    assert f"{name}:3: not UTF-8 text (byte 0xfc at character" in " ".join(result.output.split()), result.output
    assert not (tmp_path / "out.spacy").exists()


def test_jsonl_span_outside_the_tokens_is_rejected(tmp_path):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"tokens": ["a"], "spans": [[0, 2, "X"]]}), encoding="utf8")
    with pytest.raises(ValueError, match="outside the 1 tokens"):
        list(read_jsonl(source))


def test_biluo_and_iobes_tags_keep_every_span():
    assert tags_to_spans(["U-PER", "O", "B-ORG", "I-ORG", "L-ORG", "U-LOC"]) == (
        [(0, 1, "PER"), (2, 5, "ORG"), (5, 6, "LOC")], 0)
    assert tags_to_spans(["S-PER", "B-ORG", "E-ORG", "S-LOC"]) == ([(0, 1, "PER"), (1, 3, "ORG"), (3, 4, "LOC")], 0)
    # A span already ended (U-, L-, E-) cannot be continued: the I-/L- starts a new one and is counted.
    assert tags_to_spans(["U-PER", "I-PER", "B-LOC", "L-LOC", "L-LOC"]) == (
        [(0, 1, "PER"), (1, 2, "PER"), (2, 4, "LOC"), (4, 5, "LOC")], 2)


@pytest.mark.parametrize("content,column,message", [
    ("Ann NNP B-PER\nLee NNP I-PER\nsings VBZ O\n\nBob NNP B-PER\n", 1,
     r"bad.conll:1: column 1 is not a tag column .*'NNP'.*--tag-columns"),
    ("Ann O\nsings O\n\nBob O\n", 1, r"tag columns \[1\] hold no entity tags.*nothing was written"),
])
def test_a_column_without_entity_tags_is_an_error_naming_it_and_nothing_is_written(tmp_path, content, column, message):
    source = tmp_path / "bad.conll"
    source.write_text(content, encoding="utf8")
    with pytest.raises(ValueError, match=message):
        convert(read_columns(source, 0, [column]), tmp_path / "out.spacy")
    assert not (tmp_path / "out.spacy").exists()


@pytest.mark.parametrize("content,message", [
    ("", r"empty.jsonl: no records \(every line is blank\); nothing was written"),
    ("\n  \n", r"empty.jsonl: no records"),
    ('{"tokens": ["Ann"]}\n{"text": "Bob", "spans": []}\n', r"none of its 2 records has spans.*nothing was written"),
])
def test_a_jsonl_file_without_records_or_spans_is_an_error_and_nothing_is_written(tmp_path, content, message):
    source = tmp_path / "empty.jsonl"
    source.write_text(content, encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy", "--format", "jsonl", "--lang", "en")
    assert result.exit_code == 1 and re.search(message, " ".join(result.output.split())), result.output
    assert not (tmp_path / "out.spacy").exists()
    # A span that is dropped (misaligned) still counts as one: that file converts, with its report.
    source.write_text(json.dumps({"text": "Ann Lee", "spans": [[0, 5, "PER"]]}), encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy", "--format", "jsonl", "--lang", "en")
    assert result.exit_code == 0 and "1 spans were dropped" in result.output, result.output


def test_the_command_line_reports_a_missing_file_without_a_traceback(tmp_path):
    result = run("convert", tmp_path / "missing.conll", tmp_path / "out.spacy")
    # Typer draws the message in a box as wide as the terminal, so a long tmp path wraps anywhere.
    unboxed = re.sub(r"[\s│╭╮╰╯─]", "", result.output)
    assert result.exit_code == 2 and "missing.conll" in unboxed and "doesnotexist" in unboxed
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out.spacy").exists()
    with pytest.raises(FileNotFoundError, match="missing.jsonl: no such file"):
        list(read_jsonl(tmp_path / "missing.jsonl"))


PRODIGY = [
    # character offsets on text: "Ann Lee" aligns, "nn L" does not, a duplicate is dropped
    {"text": "Ann Lee met the Bank of Paris.", "spans": [{"start": 0, "end": 7, "label": "PER"},
                                                        {"start": 1, "end": 5, "label": "PER"},
                                                        {"start": 16, "end": 29, "label": "ORG"},
                                                        {"start": 24, "end": 29, "label": "LOC"},
                                                        {"start": 24, "end": 29, "label": "LOC"}]},
    # Prodigy tokens with token_start / token_end (inclusive) and "ws"
    {"text": "Hi,Bob", "tokens": [{"text": word, "ws": False} for word in ("Hi", ",", "Bob")],
     "spans": [{"start": 3, "end": 6, "token_start": 2, "token_end": 2, "label": "PER"}]},
    # spaCy v2 style: text and "entities" as [start, end, label] character offsets
    {"text": "Visit Rome now", "entities": [[6, 10, "LOC"]]},
]


def test_text_needs_a_language_or_a_pipeline_and_a_pipeline_names_its_own(tmp_path):
    source = tmp_path / "text.jsonl"
    source.write_text(json.dumps({"text": "Visit Rome now", "spans": [[6, 10, "LOC"]]}) + "\n", encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy")
    assert result.exit_code == 1 and "give --lang (e.g. en) or --model" in " ".join(result.output.split())
    assert not (tmp_path / "out.spacy").exists()
    spacy.blank("de").to_disk(tmp_path / "german")
    result = run("convert", source, tmp_path / "out.spacy", "--model", tmp_path / "german")
    assert result.exit_code == 0 and "tokenizer (language 'de')" in " ".join(result.output.split()), result.output
    result = run("convert", source, tmp_path / "out2.spacy", "--lang", "no-such-language")
    assert result.exit_code == 1 and "--lang no-such-language" in result.output


def test_prodigy_and_spacy_jsonl_keep_text_and_count_what_is_dropped(tmp_path):
    source = tmp_path / "prodigy.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in PRODIGY) + "\n", encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy", "--format", "jsonl", "--lang", "en")
    assert result.exit_code == 0, result.output
    assert f"DROPPED: 1 {MISALIGNED}" in result.output and f"DROPPED: 1 {DUPLICATE}" in result.output
    assert "prodigy.jsonl:1: 'nn L' [1, 5) does not fall on token boundaries" in result.output
    docs = list(DocBin().from_disk(tmp_path / "out.spacy").get_docs(spacy.blank("en").vocab))
    assert [d.text for d in docs] == [r["text"] for r in PRODIGY]
    spans = [sorted((s.text, s.label_) for s in d.spans["sc"]) for d in docs]
    assert spans == [[("Ann Lee", "PER"), ("Bank of Paris", "ORG"), ("Paris", "LOC")], [("Bob", "PER")],
                     [("Rome", "LOC")]]


@pytest.mark.parametrize("line,message", [
    ('{"tokens": ["a"], "spans": [[0, 1, "X"]]}\n{"tokens": [', r"bad.jsonl:2: not valid JSON"),
    ('["a", "b"]', r"bad.jsonl:1: a line must hold a JSON object, not list"),
    ('{"words": ["a"]}', r"bad.jsonl:1: a record needs \"tokens\" .* found keys \['words'\]"),
    ('{"text": "a b", "spans": [{"start": 0, "end": 1}]}', r"bad.jsonl:1: a span must be"),
    ('{"text": "a b", "spans": [[0, 9, "X"]]}', r"bad.jsonl:1: span \[0, 9\) is outside the text's 3 characters"),
    ('{"tokens": [1, 2]}', r"bad.jsonl:1: a token must be a string"),
])
def test_bad_jsonl_is_an_error_naming_the_line_and_nothing_is_written(tmp_path, line, message):
    source = tmp_path / "bad.jsonl"
    source.write_text(line + "\n", encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy", "--lang", "en")  # .jsonl: read as JSON lines
    assert result.exit_code == 1
    assert re.search(message, " ".join(result.output.split())), result.output
    assert not (tmp_path / "out.spacy").exists()


CONLL_DOCS = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O

Peter NNP B-NP I-PER
Blackburn NNP B-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
1996-08-22 CD I-NP O
-DOCSTART- -X- -X- O
Germany NNP B-NP I-LOC
"""


def test_docs_join_the_sentences_of_each_document_with_their_starts(tmp_path):
    source = tmp_path / "docs.conll"
    source.write_text(CONLL_DOCS, encoding="utf8")
    result = run("convert", source, tmp_path / "docs.spacy", "--scheme", "iob1", "--docs")
    assert result.exit_code == 0, result.output
    docs = list(DocBin().from_disk(tmp_path / "docs.spacy").get_docs(Vocab()))
    assert [d.text for d in docs] == ["EU rejects Peter Blackburn ", "BRUSSELS 1996-08-22 ", "Germany "]
    assert [[t.is_sent_start for t in d] for d in docs] == [[True, False, True, False], [True, False], [True]]
    assert [(s.start, s.end, s.label_) for s in docs[0].spans["sc"]] == [(0, 1, "ORG"), (2, 4, "PER")]
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in docs[1:]] == [[(0, 1, "LOC")], [(0, 1, "LOC")]]
    # CoNLL has no spacing, so a document keeps the file's tokens when training reads it, as a
    # sentence doc does, instead of being re-tokenized from its text ("1996-08-22" stays one token).
    nlp = spacy.blank("en")
    examples = list(Corpus(tmp_path / "docs.spacy")(nlp))
    assert all(d.has_unknown_spaces for d in docs)
    assert [[t.text for t in eg.predicted] for eg in examples] == [[t.text for t in d] for d in docs]
    # Without --docs the same file gives a doc per sentence, with no sentence annotation.
    run("convert", source, tmp_path / "sents.spacy", "--scheme", "iob1")
    sents = list(DocBin().from_disk(tmp_path / "sents.spacy").get_docs(Vocab()))
    assert [len(d) for d in sents] == [2, 2, 2, 1]


def test_docs_without_docstart_lines_is_an_error_and_nothing_is_written(tmp_path):
    source = tmp_path / "plain.conll"
    source.write_text("Paris NNP B-NP I-LOC\n\nRome NNP B-NP I-LOC\n", encoding="utf8")
    result = run("convert", source, tmp_path / "out.spacy", "--scheme", "iob1", "--docs")
    assert result.exit_code == 1 and "no -DOCSTART- lines" in " ".join(result.output.split())
    assert not (tmp_path / "out.spacy").exists()
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text('{"tokens": ["Paris"], "spans": [[0, 1, "LOC"]]}\n', encoding="utf8")
    result = run("convert", jsonl, tmp_path / "out.spacy", "--format", "jsonl", "--docs")
    assert result.exit_code == 1 and "already one doc" in " ".join(result.output.split())
