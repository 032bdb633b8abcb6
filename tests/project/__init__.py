"""Cross-cutting tests: the import structure, and whole runs through several rooms at once."""
