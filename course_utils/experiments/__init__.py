"""Each lesson's experiments: the training runs and measurements its claims rest on."""
