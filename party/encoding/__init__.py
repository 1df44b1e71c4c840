"""Encoding: linkage schema, normalisation, q-grams, keyed hashing, Bloom filters, blocking keys."""
