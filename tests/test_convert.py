"""Converters: column (IOB1/IOB2, nested) and JSON lines files to .spacy, and back."""

import json

import pytest
from spacy.tokens import DocBin
from spacy.vocab import Vocab

from spacy_fofe.__main__ import main
from spacy_fofe.convert import convert, read_columns, read_jsonl, tags_to_spans

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
    assert report.invalid_tags == 1 and report.nested == 1
    assert report.longer_than_n == {"ORG": 1}
    assert "spans longer than n=1: 1" in report.summary()


def test_column_order_is_an_option(tmp_path):
    source = tmp_path / "swapped.tsv"
    source.write_text("B-PER x Ann\nI-PER x Lee\n", encoding="utf8")
    assert list(read_columns(source, token_column=2, tag_columns=[0])) == [(["Ann", "Lee"], [[(0, 2, "PER")]], 0)]


def test_too_few_columns_is_a_clear_error(tmp_path):
    source = tmp_path / "short.tsv"
    source.write_text("Ann\tB-PER\nLee\n", encoding="utf8")
    with pytest.raises(ValueError, match="has 1 columns"):
        list(read_columns(source, 0, [1], separator="\t"))


def test_jsonl_round_trip_and_cli(tmp_path, capsys):
    source = tmp_path / "data.jsonl"
    records = [{"tokens": ["Bank", "of", "Paris"], "spans": [[0, 3, "ORG"], [2, 3, "LOC"]]}, {"tokens": ["x"]}]
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf8")
    assert main(["convert", str(source), str(tmp_path / "j.spacy"), "--format", "jsonl", "--no-ents"]) == 0
    assert "2 docs, 4 tokens, 2 spans (1 nested" in capsys.readouterr().out
    docs = read_back(tmp_path / "j.spacy")
    assert docs == [(["Bank", "of", "Paris"], [(0, 3, "ORG"), (2, 3, "LOC")], []), (["x"], [], [])]


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


def test_the_command_line_reports_a_missing_file_without_a_traceback(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "spacy_fofe", "convert", str(tmp_path / "missing.conll"),
                          str(tmp_path / "out.spacy")], capture_output=True, text=True)
    assert out.returncode == 1 and "missing.conll: no such file" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "out.spacy").exists()
