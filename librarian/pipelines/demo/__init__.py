"""`librarian demo`: the whole system at toy scale on one CPU machine."""
