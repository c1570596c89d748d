"""Training helpers: the cached corpus reader, teachers (distillation), ensembles, averaging, tuning the decoding."""
