"""Token embeddings a config chains in under the FOFE codes: lexeme tables, word vectors, word dropout,
the sentence encoder's features, the document memory."""
