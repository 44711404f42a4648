"""What every stage shares: one-line errors and exit codes, atomic writes, where outputs go and how they are
replaced, secret redaction, the checkout, make's words, machine load and tables."""
