"""The test suite: tests/<package>/ per package, cross-cutting tests in project/, helpers in helpers/."""
