"""librarian: agent-curated workspaces (build, train and evaluate)."""

__version__ = "0.1.0"
