"""Each lesson's experiments: what its claims measure."""
