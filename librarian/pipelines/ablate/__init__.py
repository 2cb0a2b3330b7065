"""`librarian ablate`: sweeps of a pipeline over a grid, cells or a search space, as Ray Tune trials."""
