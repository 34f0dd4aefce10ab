"""Git connections and talking to git repositories with their credentials (docs/git.md)."""
