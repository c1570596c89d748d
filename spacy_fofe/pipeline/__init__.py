"""The fofe_ner component (pipe verbs only), its settings, decoding, gold spans and scores."""
