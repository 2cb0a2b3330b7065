"""`librarian train_builder`: the Librarian builder trained with RL on dense telescoping rewards."""
