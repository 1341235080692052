"""Command-line tools for a GPU node (`alnair top`); the console script is `alnair`."""
