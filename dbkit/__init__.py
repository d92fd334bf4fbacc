"""Generic database utilities: writing many rows of any model in a few statements."""
