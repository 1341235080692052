"""Alnair's built-in collectors, one module each; each is registered under the
`alnair.collectors` entry-point group in pyproject.toml."""
