"""User-facing commands over a workspace: `build`, `ask`, `serve`, `view` and `diff`.

These sit on top of every other layer: they read corpora (datasets), build
and load workspaces (workspace, search), run builders and readers (roles,
models), and write what a person opens (a folder tree, an HTML viewer).
"""
