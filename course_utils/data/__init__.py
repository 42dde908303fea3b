"""Data the lessons read: the training texts (``*.txt``) and real models' configurations."""
