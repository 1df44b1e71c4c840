"""Protocol engine: segments, filtered candidate sets, secure summation, classification, oracle."""
