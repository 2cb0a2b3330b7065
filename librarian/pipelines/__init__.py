"""Pipelines: one readable recipe per command, wiring components named in config."""
