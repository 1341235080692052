"""Reading Alnair's shared-memory segments: the ABI mirror and the segment directory."""
