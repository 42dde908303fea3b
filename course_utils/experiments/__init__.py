"""Each lesson's experiments, one module per lesson (``lNN_<topic>``)."""
