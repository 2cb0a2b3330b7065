"""`librarian train_curator`: KBGym supervised curation, forward and backward passes (paper 001)."""
