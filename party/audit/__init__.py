"""Self-audit: uniqueness, bit sensitivity, frequency and insider attacks, CVPL, policy gate."""
