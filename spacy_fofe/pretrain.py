"""A `spacy pretrain` objective for the tok2vec under fofe_ner: a FOFE language model.

As in the FOFE-FFNN language model, each word is predicted from the FOFE codes of its
context: the left code up to the word before it and the right code from the word after
it, both excluding the word itself, through a maxout layer. What is predicted is spaCy's
character target (the word's first and last `n_characters` bytes, as in
`spacy.PretrainCharacters.v1`), so no vocabulary softmax and no vectors are needed. The
tok2vec learns vectors whose FOFE codes tell what word fits between them, which is what
fofe_ner's context features read. Use it with a tok2vec that sees one token at a time
(embeddings, as in configs/conll.cfg): a CNN's window would show each word to its
neighbours' vectors, and the codes would no longer exclude it.
"""

from functools import partial
from typing import Callable, Tuple

from spacy.ml.models.multi_task import get_characters_loss
from spacy.util import registry
from spacy.vocab import Vocab
from thinc.api import LayerNorm, Maxout, Model, MultiSoftmax, chain
from thinc.types import Floats2d

from .position_codes import Codes, WordFOFECodes

CONTEXT = ("left_excl", "right_excl")


@registry.architectures("spacy_fofe.PretrainFOFELM.v1")
def create_pretrain_fofe_lm(
    alpha: float = 0.5, hidden_size: int = 300, maxout_pieces: int = 3, n_characters: int = 4
) -> Callable[[Vocab, Model], Model]:
    """The objective for `[pretraining.objective]`: alpha is the forgetting factor of the
    context codes (the model's word_alpha), the rest as in spacy.PretrainCharacters.v1."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"spacy_fofe.PretrainFOFELM: alpha must be in (0.0, 1.0), got {alpha}")

    def create_objective(vocab: Vocab, tok2vec: Model) -> Model:
        codes = WordFOFECodes(alpha, left_context=True, right_context=True, bag_of_words=False)
        output = chain(
            Model("fofe_context", _context_forward),
            Maxout(nO=hidden_size, nP=maxout_pieces, normalize=True),
            LayerNorm(nI=hidden_size),
            MultiSoftmax([256] * n_characters, nI=hidden_size),
        )
        model = chain(tok2vec, codes, output)
        model.set_ref("tok2vec", tok2vec)
        model.set_ref("output_layer", output)
        model.attrs["loss"] = partial(get_characters_loss, nr_char=n_characters)
        return model

    return create_objective


def _context_forward(model: Model, codes: Codes, is_train: bool) -> Tuple[Floats2d, Callable]:
    """Each token's left and right context codes, side by side."""
    xp = model.ops.xp
    width = codes.arrays[CONTEXT[0]].shape[1]
    features = xp.concatenate([codes.arrays[name] for name in CONTEXT], axis=1)

    def backprop(d_features: Floats2d):
        zeros = model.ops.alloc2f(*d_features[:, :width].shape)
        return {"left_excl": d_features[:, :width], "right_excl": d_features[:, width:],
                "left_incl": zeros, "right_incl": zeros}

    return features, backprop



