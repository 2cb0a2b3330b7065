"""`librarian evaluate`, `evaluate_memory`, `evaluate_online`: exams, baselines, arms and prequential streams."""
