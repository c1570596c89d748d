"""Token features from spaCy's lexeme tables: word classes learnt from unlabelled text.

A name never seen in training is where fofe_ner loses most (GermEval: two thirds of the
outer spans it missed overlapped no prediction at all, mostly rare one-word names). spaCy's
`spacy-lookups-data` package ships, for German, English and Spanish, Brown clusters
(`lexeme_cluster`) and log frequencies (`lexeme_prob`) of a million words, computed on
unlabelled text: "Merkel", "Schmidt" and "Kutzner" share a cluster that "Tisch" is not in, so an
unseen surname gets the row of the surnames the training data has.

`LexemeTablesEmbed` adds, to any token embedding, an embedding of each token's table
entries looked up by its ORTH and/or LOWER form (a hash table per table and attribute,
mixed by a maxout layer as in spaCy's MultiHashEmbed; log frequencies are floored to whole
numbers first; each distinct row of a batch is embedded once, rows_once.py). With
`hyphen_parts`, a compound such as "NATO-Gipfel" or "Lehmbruck-Museum", which the tables rarely
hold, also gets the clusters of its first and last part; with `compound_heads`, a word the
cluster table lacks also gets the cluster of its longest suffix the table has ("Landesregierung":
"Regierung"; "Geichlingen": "Lingen"), the head of a closed compound. The tables are
copied into the model at initialize, as sorted hash/value arrays (12 bytes a word per table),
so a trained pipeline needs no lookups package at run time. A table in the vocab
(`[initialize.lookups]`; your own, saved to disk, through `spacy_fofe.LookupsFromDisk.v1`) takes
precedence over the package's.
"""

from functools import partial
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import numpy
from spacy.attrs import ORTH, intify_attr
from spacy.lookups import Lookups
from spacy.strings import get_string_id
from spacy.tokens import Doc
from spacy.util import load_language_data, registry
from thinc.api import HashEmbed, Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d, Ints2d

from .rows_once import embed_rows_once
from .sorted_ids import SortedIndex, positions_in, with_room
from .token_arrays import READS, per_doc, token_array

MISSING = numpy.iinfo("int32").min  # the value of a word a table does not have: one shared row
CLUSTER_TABLE = "lexeme_cluster"
# Words whose hyphen parts (or compound heads) a lookup layer keeps; past this it starts a new cache.
PART_CACHE_WORDS = 2**20
# The shortest suffix taken for a compound's head: shorter ones are endings ("-ung", "-er"), not words.
COMPOUND_HEAD_CHARS = 4


@registry.architectures("spacy_fofe.LexemeTablesEmbed.v1")
def LexemeTablesEmbed(
    embed: Model[List[Doc], List[Floats2d]],
    width: int,
    tables: List[str],
    attrs: List[str],
    rows: List[int],
    cluster_prefix_bits: Sequence[int] = (),
    hyphen_parts: bool = False,
    compound_heads: bool = False,
) -> Model[List[Doc], List[Floats2d]]:
    """`embed`'s token vectors plus an embedding of the tokens' entries in spaCy lexeme tables.

    width: the output width of `embed` (its `width` setting).
    tables: names of lexeme tables (e.g. "lexeme_cluster", "lexeme_prob").
    attrs: the token attributes looked up in each table ("ORTH", "LOWER").
    rows: the hash-embedding rows of each table.
    cluster_prefix_bits: for each k, also embed the first k steps of each word's Brown-cluster path
        (a coarser word class: the classic 4/6/10-step prefix features). spaCy stores a path
        reversed as an integer, so its first k steps are the integer's lowest k bits: Berlin (80)
        and München (848) share their first 7. Needs "lexeme_cluster" in tables; its rows are used.
    hyphen_parts: also embed the clusters of the first and the last part of a word with an inner
        hyphen ("US" and "Marketing" of "US-Marketing"); a compound rarely has a cluster of its own,
        though its parts say what it is. Needs "lexeme_cluster" in tables; its rows are used.
    compound_heads: also embed, for a word (ORTH) the cluster table lacks, the cluster of its longest
        proper suffix of at least 4 characters that the table has, first letter upper-cased: the head
        of a closed compound says whether it is a thing ("Rekordvolumen") or a name ("Schörgenhofer":
        "Hofer"). Needs "lexeme_cluster" in tables; its rows are used.
    """
    name = "spacy_fofe.LexemeTablesEmbed.v1"
    if not tables or not attrs:
        raise ValueError(f"{name}: tables and attrs must each name at least one entry")
    if len(rows) != len(tables):
        raise ValueError(f"{name}: rows has {len(rows)} entries for {len(tables)} tables; give one per table")
    attr_ids = [intify_attr(attr) for attr in attrs]
    if None in attr_ids:
        raise ValueError(f"{name}: unknown token attribute {attrs[attr_ids.index(None)]!r}")
    for setting, value in (("cluster_prefix_bits", cluster_prefix_bits), ("hyphen_parts", hyphen_parts),
                           ("compound_heads", compound_heads)):
        if value and CLUSTER_TABLE not in tables:
            raise ValueError(f"{name}: {setting} needs {CLUSTER_TABLE!r} in tables")
    if any(not 1 <= bits <= 31 for bits in cluster_prefix_bits):
        raise ValueError(f"{name}: cluster_prefix_bits must be between 1 and 31, got {cluster_prefix_bits}")
    if embed.has_dim("nO") is True and embed.get_dim("nO") != width:
        raise ValueError(f"{name}: width is {width} but the embed layer's output width is {embed.get_dim('nO')}")
    # The parts of each word seen, kept by the forward pass and never saved with the model.
    lookup = Model("lexeme_lookup", partial(_lookup_forward, part_cache=WordValues((0, 0), "uint64"), head_cache={}),
                   init=_lookup_init,
                   attrs={"tables": list(tables), "attr_ids": attr_ids, "keys": [], "values": [],
                          # The compound heads read ORTH: fetched with the other attributes where they lack it.
                          READS: attr_ids + [ORTH] if compound_heads and ORTH not in attr_ids else attr_ids,
                          "prefix_bits": list(cluster_prefix_bits), "hyphen_parts": hyphen_parts,
                          "compound_heads": compound_heads})
    # The rows of each id column: every (table, attribute) pair, then per attribute each cluster
    # prefix, then per attribute the clusters of the first and the last hyphen part, then the compound head's.
    uses_clusters = cluster_prefix_bits or hyphen_parts or compound_heads
    cluster_rows = rows[list(tables).index(CLUSTER_TABLE)] if uses_clusters else 0
    column_rows = [rows[t] for t in range(len(tables)) for _ in attrs]
    column_rows += [cluster_rows] * ((len(cluster_prefix_bits) + 2 * hyphen_parts) * len(attrs) + compound_heads)
    embeddings = [HashEmbed(width, n_rows, column=i, seed=101 + i, dropout=0.0) for i, n_rows in enumerate(column_rows)]
    table_embed = embed_rows_once(lookup, [
        with_array(chain(concatenate(*embeddings), Maxout(width, width * len(column_rows), nP=3, normalize=True))),
    ], width)
    return Model("lexeme_tables_embed", _sum_forward, init=_sum_init, layers=[embed, table_embed], dims={"nO": width})


@registry.misc("spacy_fofe.LookupsFromDisk.v1")
def lookups_from_disk(path: Path) -> Lookups:
    """Lexeme tables of your own, saved with spaCy's Lookups.to_disk, for `[initialize.lookups]`:
    LexemeTablesEmbed reads a table named in its `tables` from them (word -> number)."""
    path = Path(path)
    if not (path / "lookups.bin").is_file():
        raise ValueError(f"spacy_fofe.LookupsFromDisk.v1: {path} holds no lookups.bin, so it is not a folder of "
                         f"lexeme tables saved with spaCy's Lookups.to_disk; check the path")
    return Lookups().from_disk(path)


def _sum_init(model: Model, X=None, Y=None) -> None:
    for layer in model.layers:
        layer.initialize(X=X)


def _sum_forward(model: Model, docs: List[Doc], is_train: bool):
    """Per doc, the sum of the children's token vectors."""
    outputs, backprops = zip(*(layer(docs, is_train) for layer in model.layers))
    if outputs[0] and outputs[0][0].shape[1] != outputs[1][0].shape[1]:
        raise ValueError(f"spacy_fofe.LexemeTablesEmbed.v1: the embed layer gives vectors of width "
                         f"{outputs[0][0].shape[1]}, not the width setting {outputs[1][0].shape[1]}")
    summed = [sum(arrays) for arrays in zip(*outputs)]

    def backprop(d_summed):
        for callback in backprops:
            callback(d_summed)
        return []

    return summed, backprop


def _lookup_init(model: Model, X=None, Y=None) -> None:
    """Copy each table into the model as sorted (word hash, value) arrays."""
    if not X:
        raise ValueError("spacy_fofe.LexemeTablesEmbed.v1: initialize needs sample docs, to know the "
                         "language and vocab whose lexeme tables to read")
    vocab = X[0].vocab
    keys, values = [], []
    for table in model.attrs["tables"]:
        table_keys, table_values = _read_table(vocab, table)
        order = numpy.argsort(table_keys)
        keys.append(table_keys[order])
        values.append(table_values[order])
    model.attrs["keys"], model.attrs["values"] = keys, values


def _read_table(vocab, table: str) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """(uint64 word hashes, int32 values) of a lexeme table, from the vocab or spacy-lookups-data."""
    if vocab.lookups.has_table(table):
        entries = vocab.lookups.get_table(table)  # keyed by string hash already
        keys = numpy.fromiter(entries.keys(), dtype="uint64", count=len(entries))
        raw = list(entries.values())
    else:
        data = language_table(vocab.lang, table)
        if data is None:
            raise ValueError(
                f"spacy_fofe.LexemeTablesEmbed.v1: no lexeme table {table!r} for language {vocab.lang!r}. "
                f"Install spaCy's lookups data (pip install spacy-lookups-data; it has lexeme_cluster and "
                f"lexeme_prob for de, en and es), or put the table in the vocab ([initialize.lookups])."
            )
        keys = numpy.fromiter((get_string_id(word) for word in data), dtype="uint64", count=len(data))
        raw = list(data.values())
    try:
        values = numpy.floor(numpy.asarray(raw, dtype="float64")).astype("int32")
    except (TypeError, ValueError):
        raise ValueError(f"spacy_fofe.LexemeTablesEmbed.v1: the lexeme table {table!r} must map words to numbers "
                         f"(cluster ids, log frequencies); it holds {type(raw[0]).__name__} values") from None
    return keys, values


def language_table(lang: str, table: str) -> Optional[dict]:
    """spacy-lookups-data's table for `lang` ({word: value}), or None where it is not installed or lacks it."""
    if lang not in registry.lookups or table not in registry.lookups.get(lang):
        return None
    return load_language_data(registry.lookups.get(lang)[table])


def lookup_values(keys: numpy.ndarray, values: numpy.ndarray, queries: numpy.ndarray) -> numpy.ndarray:
    """The value of each query hash in a sorted table, MISSING where the table lacks it."""
    index = positions_in(keys, queries)
    return numpy.where(index >= 0, values[index] if len(values) else MISSING, MISSING).astype("int32")


def cluster_prefixes(clusters: numpy.ndarray, bits: Sequence[int]) -> List[numpy.ndarray]:
    """For each k in bits, the first k steps of each Brown-cluster path (its lowest k bits), MISSING kept."""
    return [numpy.where(clusters == MISSING, MISSING, clusters & ((1 << k) - 1)).astype("int32") for k in bits]


def hyphen_parts_of(word: str) -> Tuple[int, int]:
    """The string ids of a word's first and last hyphen-separated part; 0 (no word) for both where
    no hyphen stands between two other characters ("UN-" and "-Gipfel" have none)."""
    if "-" not in word.strip("-"):
        return 0, 0
    parts = [part for part in word.split("-") if part]
    return get_string_id(parts[0]), get_string_id(parts[-1])


class WordValues:
    """What `per_distinct_word` worked out for each word hash, kept in arrays (the hashes in a SortedIndex):
    a batch's words are found by one binary search, and only words not seen before are worked out."""

    def __init__(self, default, dtype: str):
        self.default = numpy.asarray(default, dtype=dtype)
        self.clear()

    def clear(self) -> None:
        self.index, self.n_words = SortedIndex(), 0
        self.values = numpy.zeros((0, *self.default.shape), dtype=self.default.dtype)

    def __len__(self) -> int:
        return self.n_words

    def add(self, words: numpy.ndarray, values: numpy.ndarray) -> numpy.ndarray:
        """Keep `values` for the distinct new `words`; return their slots."""
        slots = numpy.arange(self.n_words, self.n_words + len(words))
        self.values = with_room(self.values, self.n_words, len(words))
        self.values[slots] = values
        self.index.add(words, slots)
        self.n_words += len(words)
        return slots


def per_distinct_word(strings, words: numpy.ndarray, cache: WordValues, work_out: Callable) -> numpy.ndarray:
    """Each word hash's result (the cache's default for a hash the strings lack), worked out once per distinct
    word and kept in `cache`, which starts again past PART_CACHE_WORDS words: `work_out(texts)` gives one
    result per text, for all the words not in `cache` at once."""
    distinct, inverse = numpy.unique(numpy.asarray(words, dtype="uint64"), return_inverse=True)
    if len(cache) + len(distinct) > PART_CACHE_WORDS:
        cache.clear()
    slots = cache.index.find(distinct)
    new = numpy.flatnonzero(slots < 0)
    if len(new):
        keys = distinct[new].tolist()
        values = numpy.repeat(cache.default[None], len(new), axis=0)
        known = [i for i, key in enumerate(keys) if key in strings]
        if known:
            values[known] = numpy.asarray(work_out([strings[keys[i]] for i in known]), dtype=values.dtype).reshape(
                (len(known), *cache.default.shape))
        slots[new] = cache.add(distinct[new], values)
    return cache.values[slots][inverse.reshape(-1)]


def part_ids(strings, words: numpy.ndarray, cache: WordValues) -> numpy.ndarray:
    """(len(words), 2) uint64: hyphen_parts_of each word hash, worked out once per distinct word (`cache`:
    WordValues((0, 0), "uint64"))."""
    return per_distinct_word(strings, words, cache, lambda texts: list(map(hyphen_parts_of, texts)))


def compound_head_of(word: str, keys: numpy.ndarray, values: numpy.ndarray) -> int:
    """The value (cluster) of the longest proper suffix of `word`, of at least COMPOUND_HEAD_CHARS
    characters, that a sorted table has, its first letter upper-cased; MISSING where none is."""
    return int(compound_heads([word], keys, values)[0])


def compound_heads(words: Sequence[str], keys: numpy.ndarray, values: numpy.ndarray) -> numpy.ndarray:
    """compound_head_of each of `words` (int32), with one table lookup for all their suffixes: a first
    pass over new text has thousands of words without a cluster."""
    suffixes = [word[i].upper() + word[i + 1:] for word in words for i in range(1, len(word) - COMPOUND_HEAD_CHARS + 1)]
    heads = numpy.full(len(words), MISSING, dtype="int32")
    if not suffixes:
        return heads
    n_suffixes = numpy.fromiter((max(0, len(word) - COMPOUND_HEAD_CHARS) for word in words), dtype="int64",
                                count=len(words))
    owner = numpy.repeat(numpy.arange(len(words)), n_suffixes)
    found = lookup_values(keys, values, numpy.fromiter(map(get_string_id, suffixes), dtype="uint64",
                                                       count=len(suffixes)))
    hits = numpy.flatnonzero(found != MISSING)
    # A word's suffixes come longest first, so its first hit is its head.
    hit_words, first_hit = numpy.unique(owner[hits], return_index=True)
    heads[hit_words] = found[hits[first_hit]]
    return heads


def compound_heads_of(strings, words: numpy.ndarray, clusters: numpy.ndarray, keys: numpy.ndarray,
                      values: numpy.ndarray, cache: dict) -> numpy.ndarray:
    """compound_head_of each word hash whose own cluster is MISSING (MISSING for the others), worked
    out once per distinct word (the new ones in one `compound_heads`). The heads in `cache` hold for
    the table they came from: a new table (the layer initialized again, or loaded in place) starts
    them again."""
    if cache.get("table") is not values:
        cache.clear()
        cache.update(table=values, heads=WordValues(MISSING, "int32"))
    heads = numpy.full(len(words), MISSING, dtype="int32")
    lacking = clusters == MISSING
    heads_of = partial(compound_heads, keys=keys, values=values)
    heads[lacking] = per_distinct_word(strings, words[lacking], cache["heads"], heads_of)
    return heads


def _lookup_forward(model: Model, docs: List[Doc], is_train: bool, part_cache: WordValues, head_cache: dict):
    keys, values = model.attrs["keys"], model.attrs["values"]
    if not keys:
        raise ValueError("spacy_fofe.LexemeTablesEmbed.v1: the lexeme tables are not loaded; "
                         "initialize the model first")
    if not docs:
        return [], lambda d_features: []
    attr_ids, fetched = model.attrs["attr_ids"], model.attrs[READS]
    # One lookup for the whole batch: the docs' word hashes one after the other, then the ids split per doc.
    words = token_array(docs, fetched)
    # A batch repeats its words: each attribute's distinct hashes are looked up, then given to their tokens.
    distinct, inverse = zip(*(numpy.unique(words[:, a], return_inverse=True) for a in range(len(attr_ids))))
    inverse = [each.reshape(-1) for each in inverse]
    columns = [lookup_values(k, v, distinct[a])[inverse[a]] for k, v in zip(keys, values) for a in range(len(attr_ids))]
    if model.attrs["prefix_bits"]:
        first = model.attrs["tables"].index(CLUSTER_TABLE) * len(attr_ids)
        for a in range(len(attr_ids)):
            columns.extend(cluster_prefixes(columns[first + a], model.attrs["prefix_bits"]))
    if model.attrs["hyphen_parts"]:
        table = model.attrs["tables"].index(CLUSTER_TABLE)
        for a in range(len(attr_ids)):
            parts = part_ids(docs[0].vocab.strings, distinct[a], part_cache)
            columns.extend(lookup_values(keys[table], values[table], parts[:, side])[inverse[a]] for side in (0, 1))
    if model.attrs["compound_heads"]:
        table, a = model.attrs["tables"].index(CLUSTER_TABLE), fetched.index(ORTH)
        clusters = columns[table * len(attr_ids) + a] if a < len(attr_ids) else \
            lookup_values(keys[table], values[table], words[:, a])
        columns.append(compound_heads_of(docs[0].vocab.strings, words[:, a], clusters, keys[table], values[table],
                                         head_cache))
    ids = numpy.stack(columns, axis=1)
    # HashEmbed hashes uint64 ids; the int32 values (negative ones included) map one to one.
    # Host arrays: the rows-once layer around this one sends only the distinct rows to the device.
    ids = numpy.ascontiguousarray(ids.astype("int64").view("uint64"))
    features: List[Ints2d] = per_doc(ids, [len(doc) for doc in docs])
    return features, lambda d_features: []
