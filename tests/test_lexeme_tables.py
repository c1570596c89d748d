"""spacy_fofe.LexemeTablesEmbed.v1: lexeme-table entries (Brown clusters, log frequencies) as token features."""

from pathlib import Path

import numpy
import pytest
import spacy
from spacy.lookups import Lookups
from spacy.strings import get_string_id
from spacy.tokens import Doc
from spacy.util import registry

from spacy_fofe.features.lexeme_tables import (
    MISSING,
    LexemeTablesEmbed,
    WordValues,
    cluster_prefixes,
    compound_head_of,
    compound_heads,
    hyphen_parts_of,
    lookup_values,
    per_distinct_word,
)
from spacy_fofe.features.word_dropout import WordDropoutHashEmbed

from helpers import LEXEME_TABLES_EMBED, NESTED, make_examples, overfit_with_tok2vec, predicted, with_tables


def embed(width=16, tables=("lexeme_cluster", "lexeme_prob"), attrs=("ORTH", "LOWER"), rows=(50, 20), prefix_bits=(),
          hyphen_parts=False, compound_heads=False):
    words = WordDropoutHashEmbed(width=width, attrs=["NORM", "SHAPE"], rows=[100, 50], include_static_vectors=False)
    return LexemeTablesEmbed(words, width, list(tables), list(attrs), list(rows), list(prefix_bits), hyphen_parts,
                             compound_heads)


def lookup_layer(model):
    return next(node for node in model.walk() if node.name == "lexeme_lookup")


def test_lookup_values_matches_a_dict():
    rng = numpy.random.default_rng(0)
    keys = rng.choice(10**6, size=500, replace=False).astype("uint64")
    values = rng.integers(-50, 50, size=500).astype("int32")
    table = dict(zip(keys.tolist(), values.tolist()))
    order = numpy.argsort(keys)
    queries = numpy.concatenate([keys[:100], rng.integers(0, 2 * 10**6, size=300).astype("uint64"),
                                 numpy.array([0, 2**64 - 1], dtype="uint64")])
    expected = [table.get(q, MISSING) for q in queries.tolist()]
    assert lookup_values(keys[order], values[order], queries).tolist() == expected
    empty = numpy.zeros((0,), dtype="uint64")
    assert lookup_values(empty, empty.astype("int32"), queries[:3]).tolist() == [MISSING] * 3


def test_tokens_get_their_table_entries_by_orth_and_lower():
    nlp = with_tables()
    model = embed()
    docs = [nlp("Ann met paris in Paris"), nlp("")]
    model.initialize(X=docs)
    features = lookup_layer(model).predict(docs)
    # columns: (cluster, ORTH), (cluster, LOWER), (prob, ORTH), (prob, LOWER); probs floored
    expected = [[40, MISSING, -11, -15],
                [MISSING, MISSING, MISSING, MISSING],
                [9, 9, MISSING, MISSING],
                [MISSING, MISSING, MISSING, MISSING],
                [7, 9, -9, MISSING]]
    assert features[0].view("int64").tolist() == expected
    assert features[1].shape == (0, 4)
    assert lookup_layer(model).predict([]) == [] and model.predict([]) == []
    vectors = model.predict(docs)
    assert [v.shape for v in vectors] == [(5, 16), (0, 16)]
    # the same entries give the same table vector (Toronto and Quillmere: cluster 7, no other entry)
    table_vectors = model.layers[1].predict([nlp("Toronto Quillmere Lee")])[0]
    numpy.testing.assert_allclose(table_vectors[0], table_vectors[1])
    assert not numpy.allclose(table_vectors[0], table_vectors[2])


def test_cluster_path_prefixes_are_the_lowest_bits_of_the_cluster_id():
    clusters = numpy.asarray([40, 7, 848, 80, MISSING], dtype="int32")
    assert [p.tolist() for p in cluster_prefixes(clusters, [2, 7])] == [[0, 3, 0, 0, MISSING], [40, 7, 80, 80, MISSING]]
    nlp = with_tables()
    model = embed(tables=["lexeme_prob", "lexeme_cluster"], attrs=["ORTH"], prefix_bits=[2, 3])
    model.initialize(X=[nlp("Ann")])
    # columns: (prob, ORTH), (cluster, ORTH), then the cluster's 2- and 3-step prefixes
    features = lookup_layer(model).predict([nlp("Ann Toronto the")])[0].view("int64").tolist()
    assert features == [[-11, 40, 0, 0], [MISSING, 7, 3, 7], [-4, MISSING, MISSING, MISSING]]
    assert model.predict([nlp("Ann Toronto the")])[0].shape == (3, 16)


def test_hyphen_parts_are_the_first_and_last_part_around_inner_hyphens():
    def parts(word):
        return [get_string_id(part) if part else 0 for part in part_strings[word]]

    part_strings = {"US-Marketing": ["US", "Marketing"], "Saint-Germain-en-Montagne": ["Saint", "Montagne"],
                    "a--b": ["a", "b"], "UN-": ["", ""], "-Nominierung": ["", ""], "Paris": ["", ""], "-": ["", ""],
                    "": ["", ""]}
    for word in part_strings:
        assert list(hyphen_parts_of(word)) == parts(word), word


def test_a_compound_gets_the_clusters_of_its_parts_and_saves_no_cache():
    def make():
        return embed(tables=["lexeme_cluster"], attrs=["ORTH", "LOWER"], rows=[50], hyphen_parts=True)

    words = ["Ann-Toronto", "Paris", "UN-", "Bob-x-paris"]  # as a pretokenized corpus has them
    # columns: (cluster, ORTH), (cluster, LOWER), then per attribute the first and the last part's cluster
    expected = [[MISSING, MISSING, 40, 7, MISSING, MISSING],
                [7, 9, MISSING, MISSING, MISSING, MISSING],
                [MISSING, MISSING, MISSING, MISSING, MISSING, MISSING],
                [MISSING, MISSING, 40, 9, MISSING, 9]]
    assert_lookups_saved_without_cache(make, words, expected)


def assert_lookups_saved_without_cache(make, words, expected):
    """The lookup layer of make()'s model gives `expected` for `words`; what it works out per word is
    kept for speed, not saved: the model's bytes do not change, and a reloaded model gives the same."""
    nlp = with_tables()
    model = make()
    model.initialize(X=[nlp("Ann")])
    unseen = model.to_bytes()
    doc = Doc(nlp.vocab, words=words)
    assert lookup_layer(model).predict([doc])[0].view("int64").tolist() == expected
    assert model.predict([doc])[0].shape == (len(words), 16)
    assert model.to_bytes() == unseen
    reloaded = make()
    reloaded.from_bytes(unseen)
    assert lookup_layer(reloaded).predict([doc])[0].view("int64").tolist() == expected
    numpy.testing.assert_allclose(reloaded.predict([doc])[0], model.predict([doc])[0])


def test_compound_head_is_the_longest_known_suffix_of_four_characters_or_more():
    table = {"Regierung": 3, "Hofer": 40, "Gierung": 5, "Ung": 9, "Paris": 7}
    keys = numpy.asarray([get_string_id(word) for word in table], dtype="uint64")
    values = numpy.asarray(list(table.values()), dtype="int32")
    order = numpy.argsort(keys)
    heads = {"Landesregierung": 3, "landesregierung": 3, "Schörgenhofer": 40, "Zeitung": MISSING, "Regierung": 5,
             "Paris": MISSING, "Hofer": MISSING, "Ung": MISSING, "": MISSING, "Ostparis": 7}
    for word, head in heads.items():
        assert compound_head_of(word, keys[order], values[order]) == head, word


def test_compound_heads_of_many_words_at_once_are_each_words_own():
    table = {"Regierung": 3, "Hofer": 40, "Gierung": 5, "Paris": 7, "Lingen": 8}
    keys = numpy.asarray([get_string_id(word) for word in table], dtype="uint64")
    values = numpy.asarray(list(table.values()), dtype="int32")
    order = numpy.argsort(keys)
    # Words with no suffix, several hits, none, and the same word twice, so that a word's first hit
    # must not be taken from its neighbour's suffixes.
    words = ["Ostparis", "", "Ung", "Landesregierung", "Zeitung", "Geichlingen", "Schörgenhofer", "Ostparis",
             "Hofer", "xRegierung"]
    expected = [compound_head_of(word, keys[order], values[order]) for word in words]
    assert expected == [7, MISSING, MISSING, 3, MISSING, 8, 40, 7, MISSING, 3]
    assert compound_heads(words, keys[order], values[order]).tolist() == expected
    assert compound_heads([], keys[order], values[order]).tolist() == []


def test_a_word_without_a_cluster_gets_its_compound_heads_and_saves_no_cache():
    def make():
        return embed(tables=["lexeme_cluster"], attrs=["ORTH", "LOWER"], rows=[50], compound_heads=True)

    words = ["Fortoronto", "Paris", "Hauptparis", "Ann", "Lee", "xyzLee", "Tann"]
    # columns: (cluster, ORTH), (cluster, LOWER), then the head's cluster, for words whose ORTH has none
    expected = [[MISSING, MISSING, 7], [7, 9, MISSING], [MISSING, MISSING, 7], [40, MISSING, MISSING],
                [41, MISSING, MISSING], [MISSING, MISSING, MISSING], [MISSING, MISSING, MISSING]]
    assert_lookups_saved_without_cache(make, words, expected)


def test_compound_heads_follow_a_new_table_in_a_layer_that_has_run():
    def layer_on(table):
        nlp = spacy.blank("de")
        nlp.vocab.lookups.add_table("lexeme_cluster", table)
        return nlp

    old, new = layer_on({"Hofer": 40}), layer_on({"Hofer": 41})
    model = embed(tables=["lexeme_cluster"], attrs=["ORTH"], rows=[50], compound_heads=True)
    doc = Doc(old.vocab, words=["Schörgenhofer"])
    model.initialize(X=[old("Hofer")])
    assert lookup_layer(model).predict([doc])[0].view("int64").tolist() == [[MISSING, 40]]
    model.initialize(X=[new("Hofer")])
    assert lookup_layer(model).predict([doc])[0].view("int64").tolist() == [[MISSING, 41]]
    saved_with_old = embed(tables=["lexeme_cluster"], attrs=["ORTH"], rows=[50], compound_heads=True)
    saved_with_old.initialize(X=[old("Hofer")])
    model.from_bytes(saved_with_old.to_bytes())
    assert lookup_layer(model).predict([doc])[0].view("int64").tolist() == [[MISSING, 40]]


def test_a_table_in_the_vocab_is_used_before_the_lookups_package():
    nlp = spacy.blank("de")
    nlp.vocab.lookups.add_table("lexeme_cluster", {"Tisch": 12345})
    model = embed(tables=["lexeme_cluster"], attrs=["ORTH"], rows=[50])
    model.initialize(X=[nlp("Tisch")])
    assert lookup_layer(model).predict([nlp("Tisch Merkel")])[0].view("int64").tolist() == [[12345], [MISSING]]


def test_missing_tables_and_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="spacy-lookups-data"):
        embed(tables=["no_such_table"], rows=[10]).initialize(X=[spacy.blank("en")("a")])
    words_to_lemmas = spacy.blank("en")
    words_to_lemmas.vocab.lookups.add_table("lemma_lookup", {"mice": "mouse"})
    with pytest.raises(ValueError, match="must map words to numbers"):
        embed(tables=["lemma_lookup"], rows=[10]).initialize(X=[words_to_lemmas("mice")])
    with pytest.raises(ValueError, match="sample docs"):
        embed().initialize()
    with pytest.raises(ValueError, match="one per table"):
        embed(rows=[10])
    with pytest.raises(ValueError, match="unknown token attribute"):
        embed(attrs=["NOT_AN_ATTR"])
    with pytest.raises(ValueError, match="needs 'lexeme_cluster'"):
        embed(tables=["lexeme_prob"], rows=[10], prefix_bits=[4])
    with pytest.raises(ValueError, match="hyphen_parts needs 'lexeme_cluster'"):
        embed(tables=["lexeme_prob"], rows=[10], hyphen_parts=True)
    with pytest.raises(ValueError, match="compound_heads needs 'lexeme_cluster'"):
        embed(tables=["lexeme_prob"], rows=[10], compound_heads=True)
    with pytest.raises(ValueError, match="between 1 and 31"):
        embed(prefix_bits=[0])
    nlp = with_tables()
    with pytest.raises(ValueError, match="width"):  # when the embed knows its width, or else at its first run
        wrong_width = LexemeTablesEmbed(embed(width=16).layers[0], 24, ["lexeme_cluster"], ["ORTH"], [10])
        wrong_width.initialize(X=[nlp("Ann")])
        wrong_width.predict([nlp("Ann")])
    untrained = embed()
    with pytest.raises(ValueError, match="initialize"):
        lookup_layer(untrained).predict([nlp("Ann")])


def test_fofe_ner_trains_with_lexeme_tables_and_keeps_them_in_the_model(tmp_path):
    nlp = overfit_with_tok2vec(with_tables(), LEXEME_TABLES_EMBED)
    nlp.to_disk(tmp_path / "lexemes")
    reloaded = spacy.load(tmp_path / "lexemes")
    for name in ("lexeme_cluster", "lexeme_prob"):
        reloaded.vocab.lookups.remove_table(name)  # the model holds its own copy
    texts = [t for t, _ in NESTED] + ["Quillmere hired Bob ."]
    assert [predicted(reloaded(t)) for t in texts] == [predicted(nlp(t)) for t in texts]
    layer = lookup_layer(reloaded.get_pipe("fofe_ner").model)
    assert get_string_id("Quillmere") in layer.attrs["keys"][0].tolist()


def test_german_clusters_from_spacy_lookups_data_group_surnames():
    pytest.importorskip("spacy_lookups_data")
    nlp = spacy.blank("de")
    model = embed(tables=["lexeme_cluster"], attrs=["ORTH"], rows=[50], prefix_bits=[7])
    model.initialize(X=[nlp("Haus")])
    ids = lookup_layer(model).predict([nlp("Merkel Schmidt Tisch Qxzvbnw")])[0].view("int64")[:, 0].tolist()
    assert ids[0] == ids[1] != ids[2] and ids[3] == MISSING
    # two cities in different clusters that share the first 7 steps of their paths, unlike a surname
    prefixes = lookup_layer(model).predict([nlp("Berlin München Merkel")])[0].view("int64")[:, 1]
    berlin, muenchen, merkel = prefixes.tolist()
    assert berlin == muenchen != merkel


def test_tables_saved_to_disk_are_read_at_initialize_through_the_config(tmp_path):
    tables = Lookups()
    tables.add_table("place_names", {"Quillmere": 5, "quillmere": 7})
    tables.to_disk(tmp_path / "place_names")
    config = spacy.util.load_config(Path(__file__).resolve().parents[1] / "configs" / "conll.cfg", overrides={
        "components.fofe_ner.model.tok2vec.tables": ["place_names"],
        "components.fofe_ner.model.tok2vec.rows": [10],
        "components.fofe_ner.model.tok2vec.cluster_prefix_bits": [],
        "initialize.lookups": {"@misc": "spacy_fofe.LookupsFromDisk.v1", "path": str(tmp_path / "place_names")},
    })
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    model = nlp.get_pipe("fofe_ner").model
    features = lookup_layer(model).predict([nlp("Quillmere QUILLMERE quillmere")])[0]
    assert features.view("int64").tolist() == [[5, 7], [MISSING, 7], [7, 7]]  # by ORTH, by LOWER
    with pytest.raises(ValueError, match="no lookups.bin"):
        registry.misc.get("spacy_fofe.LookupsFromDisk.v1")(tmp_path / "nothing_here")


def test_per_distinct_word_works_out_each_new_word_once_and_keeps_its_value(monkeypatch):
    import spacy_fofe.features.lexeme_tables as lexeme_tables

    strings = spacy.blank("de").vocab.strings
    texts = ["US-Marketing", "Haus", "NATO-Gipfel", "Haus", "-x"]
    ids = numpy.asarray([strings.add(text) for text in texts] + [12345], dtype="uint64")  # 12345: no string
    worked_out = []

    def work_out(batch):
        worked_out.append(list(batch))
        return [hyphen_parts_of(text) for text in batch]

    cache = WordValues((0, 0), "uint64")
    expected = [list(hyphen_parts_of(text)) for text in texts] + [[0, 0]]
    assert per_distinct_word(strings, ids, cache, work_out).tolist() == expected
    assert sorted(worked_out[0]) == sorted(set(texts)) and len(cache) == 5
    assert per_distinct_word(strings, ids[::-1], cache, work_out).tolist() == expected[::-1]
    assert len(worked_out) == 1  # every word kept
    monkeypatch.setattr(lexeme_tables, "PART_CACHE_WORDS", 6)  # past the limit: starts afresh
    more = numpy.asarray([strings.add("EU-Gipfel"), ids[0]], dtype="uint64")
    assert per_distinct_word(strings, more, cache, work_out).tolist() == [
        list(hyphen_parts_of("EU-Gipfel")), expected[0]]
    assert sorted(worked_out[1]) == ["EU-Gipfel", "US-Marketing"] and len(cache) == 2
